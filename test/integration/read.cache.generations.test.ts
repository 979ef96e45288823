/**
 * The read cache's generations in Redis (src/Authors/SharedGenerations.ts `BUMP_LUA`, Store/Redis.ts
 * `nextGenerationLua`): a value is never issued twice, also after Redis went back to older values
 * (keys set back by hand, as a restore or a failover to a replica that lagged leaves them) or lost
 * them; the list's record keeps its append rule — on one server and in a Redis Cluster, whose
 * bumps are scripts per slot; and a reconnection (a "ready" after the first; in a cluster a
 * node's connection lost) resets the instance's side, the first connection does not.
 */
import { Effect, Exit, Scope } from "effect"
import { Cluster } from "ioredis"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { generationKeyOf, LIST_GENERATION_KEY, scopeOfId, type WriteKind } from "../../src/Authors/Generations.ts"
import { redisGenerations } from "../../src/Authors/SharedGenerations.ts"
import { makeRedis, type RedisConnection } from "../../src/Store/Redis.ts"
import { onPath } from "../support/Binaries.ts"
import { eventually } from "../support/Eventually.ts"
import { startRedisServer } from "../support/RedisServer.ts"
import { connectTo, redisModes } from "../support/RedisModes.ts"

/** KEYS on every primary (a cluster's keys are spread over them). */
const keysOf = async (client: RedisConnection, pattern: string) =>
  client instanceof Cluster ? (await Promise.all(client.nodes("master").map((node) => node.keys(pattern)))).flat() : client.keys(pattern)

// Once per Redis mode of the run: in a Redis Cluster the list's record and each shard are bumped by scripts of their own.
for (const mode of redisModes) describe(`generations in Redis (${mode.name})`, () => {
  let client: RedisConnection
  const prefix = `test-generations-${randomUUID()}:`
  const listKey = `${prefix}${LIST_GENERATION_KEY}`
  const shardKey = (id: number) => `${prefix}${generationKeyOf(scopeOfId(id))}`
  beforeAll(() => {
    client = connectTo(mode)
  })
  afterAll(async () => {
    for (const key of await keysOf(client, `${prefix}*`)) await client.del(key)
    client.disconnect()
  })

  const generations = () => redisGenerations(client, prefix)
  const bump = (id: number | ReadonlyArray<number> | undefined, kind: WriteKind) =>
    Effect.runPromise(generations().bump(typeof id === "number" ? [id] : id, kind))
  const values = async (id: number) => {
    const [rows, count, high] = await client.hmget(listKey, "rows", "count", "high")
    return { rows: Number(rows), count: Number(count), high: Number(high ?? 0), shard: Number(await client.get(shardKey(id))) }
  }

  it("never issues a value twice: after keys set back to older values, and after keys lost, each value is above every value issued before", async () => {
    const issued: Array<number> = []
    const record = async (id: number) => {
      const v = await values(id)
      issued.push(v.rows, v.count, v.shard)
      return v
    }
    await bump(7, "update")
    const before = { list: await client.hgetall(listKey), shard: await client.get(shardKey(7)) }
    await record(7)
    for (let i = 0; i < 5; i++) {
      await bump(7, "update")
      await record(7)
    }
    // Back to the snapshot, as a restore or a lagging replica leaves them; then lost altogether.
    await client.hset(listKey, before.list)
    await client.set(shardKey(7), before.shard!)
    const highest = Math.max(...issued)
    await bump(7, "delete")
    const afterRollback = await values(7)
    expect(afterRollback.rows).toBeGreaterThan(highest)
    expect(afterRollback.count).toBeGreaterThan(highest)
    expect(afterRollback.shard).toBeGreaterThan(highest)
    for (const key of [listKey, shardKey(7)]) await client.del(key)
    await bump(7, "update")
    const afterLoss = await values(7)
    for (const value of [afterLoss.rows, afterLoss.count, afterLoss.shard]) expect(value).toBeGreaterThan(Math.max(afterRollback.rows, afterRollback.count, afterRollback.shard))
  })

  it("the list's record: a create not below `high` moves the count only, any other write the rows too; a write of unknown id no shard", async () => {
    await bump(100, "create")
    let before = await values(100)
    expect(before.high).toBe(100)
    await bump(101, "create")
    let after = await values(101)
    expect({ rows: after.rows, high: after.high }).toEqual({ rows: before.rows, high: 101 })
    expect(after.count).toBeGreaterThan(before.count)
    for (const [id, kind] of [[50, "create"], [101, "update"], [101, "delete"]] as const) {
      before = await values(id)
      await bump(id, kind)
      after = await values(id)
      expect(after.rows, `${kind} ${id}`).toBeGreaterThan(before.rows)
      expect(after.count, `${kind} ${id}`).toBeGreaterThan(before.count)
      expect(after.high).toBe(101)
    }
    // One statement's creates: appends when none is below `high` (the count only, `high` their largest), else the rows too.
    before = await values(102)
    await bump([104, 102, 103], "create")
    after = await values(103)
    expect({ rows: after.rows, high: after.high }).toEqual({ rows: before.rows, high: 104 })
    expect(after.count).toBeGreaterThan(before.count)
    for (const id of [102, 103, 104]) expect((await values(id)).shard, `shard of ${id}`).toBeGreaterThan(0)
    before = await values(105)
    await bump([105, 90], "create")
    after = await values(105)
    expect(after.rows).toBeGreaterThan(before.rows)
    expect({ high: after.high, shard: after.shard > before.shard }).toEqual({ high: 105, shard: true })
    const shards = await keysOf(client, `${prefix}authors:gen:id:*`)
    before = await values(101)
    await bump(undefined, "create")
    after = await values(101)
    expect(after.rows).toBeGreaterThan(before.rows)
    expect(await keysOf(client, `${prefix}authors:gen:id:*`)).toEqual(expect.arrayContaining(shards))
    expect((await keysOf(client, `${prefix}authors:gen:id:*`)).length).toBe(shards.length)
  })
})

describe.runIf(onPath("redis-server"))("a Redis reconnection", () => {
  it("resets the instance's side of the tags on every reconnection, not on the first connection", async () => {
    const redis = await startRedisServer()
    const client = makeRedis(redis.url)
    client.on("error", () => {})
    const scope = Effect.runSync(Scope.make())
    try {
      let resets = 0
      await Effect.runPromise(Scope.provide(redisGenerations(client, "p:").onReset(() => resets++), scope))
      await eventually(() => client.status === "ready", "the first connection")
      expect(resets).toBe(0)
      await redis.restart()
      await eventually(() => resets === 1, "the reset after the reconnection")
      await redis.restart()
      await eventually(() => resets === 2, "the reset after the second reconnection")
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      client.disconnect()
      await redis.kill("SIGTERM")
    }
  })

  const cluster = redisModes.find((mode) => mode.name === "Redis Cluster")
  it.runIf(cluster !== undefined)("in a Redis Cluster: resets when a node's connection is lost (it ends for good and is made again), not before", async () => {
    const client = makeRedis(cluster!.target) as Cluster
    client.on("error", () => {})
    const admin = connectTo(cluster!)
    const scope = Effect.runSync(Scope.make())
    try {
      let resets = 0
      await Effect.runPromise(Scope.provide(redisGenerations(client, "p:").onReset(() => resets++), scope))
      await client.ping()
      const node = client.nodes("master")[0]!
      const id = await node.client("ID")
      // The slot map refreshed meanwhile, its primaries unchanged: no reset.
      await new Promise<void>((resolve) => client.refreshSlotsCache(() => resolve()))
      expect(resets).toBe(0)
      const [host, port] = [node.options.host, node.options.port]
      const server = (admin as Cluster).nodes("master").find((n) => n.options.host === host && n.options.port === port)!
      await server.client("KILL", "ID", String(id))
      await eventually(() => resets >= 1, "the reset after the node's connection was lost")
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      client.disconnect()
      admin.disconnect()
    }
  })
})
