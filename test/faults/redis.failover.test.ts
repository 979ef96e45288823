/**
 * docs/operations.md#redis-failover: a Redis primary killed under load, in a Redis Cluster (a
 * replica takes its slots) and in a Sentinel group (the Sentinels promote the replica), with two
 * instances of the service on it — one with RATE_LIMIT_FAIL_MODE=closed, one with `open`:
 * - meanwhile `/health` reports `redis` unhealthy, and the rate limits follow the fail mode
 *   (429 on the closed instance, answered without a decision on the open one), never a 500;
 * - the service reconnects by itself: `/health` healthy again, decisions from Redis again;
 * - broadcasts reach both instances' clients again (each instance's subscription is back on the
 *   new primary), WebSocket sessions still expire, and connection counts heal (leases the new
 *   primary lost — a replica that lagged — are written back, and the limit still holds).
 *
 * The replacement is held back until the outage has been seen (the killed primary's replica is
 * paused with SIGSTOP and resumed; the Sentinels are told to wait an hour before they call the
 * primary down, then 1 s): the test waits for events, never for time.
 * Private topologies (test/support/RedisTopology.ts), started from `redis-server`.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, describe, expect, it } from "vitest"
import { onPath } from "../support/Binaries.ts"
import { eventually } from "../support/Eventually.ts"
import { clusterMode, connectTo, type RedisMode, sentinelMode } from "../support/RedisModes.ts"
import { redisCall, type RedisProcess, startRedisCluster, startRedisSentinelGroup } from "../support/RedisTopology.ts"
import { request, signToken, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"

/** What the test needs of a topology: the keys it must find on the primary it kills, and the kill. */
interface Failover {
  readonly mode: RedisMode
  /** Whether `keys` are on one primary (always, but in a cluster). */
  readonly together: (keys: ReadonlyArray<string>) => Promise<boolean>
  /** Pauses what would replace the primary holding `keys`, kills that primary. */
  readonly kill: (keys: ReadonlyArray<string>) => Promise<void>
  /** Lets the replacement happen; resolves with the new primary once it serves. */
  readonly release: () => Promise<RedisProcess>
  /** How many of this run's connections subscribe `channel` on `server` (sharded in a cluster). */
  readonly subscribers: (server: RedisProcess, channel: string) => Promise<number>
  readonly stop: () => Promise<void>
}

const numsub = async (server: RedisProcess, command: string, channel: string) =>
  Number((await redisCall(server.port, "PUBSUB", command, channel)).split("\r\n").find((line) => line.startsWith(":"))?.slice(1) ?? 0)

const clusterFailover = async (): Promise<Failover> => {
  const cluster = await startRedisCluster()
  let killed: RedisProcess | undefined
  let key = ""
  let paused: ReadonlyArray<RedisProcess> = []
  const primaries = (keys: ReadonlyArray<string>) => Promise.all(keys.map((k) => cluster.primaryOf(k)))
  return {
    mode: clusterMode(cluster.seeds),
    together: async (keys) => new Set(await primaries(keys)).size === 1,
    kill: async (keys) => {
      const owners = await primaries(keys)
      if (new Set(owners).size !== 1) throw new Error("the keys are not on one primary")
      killed = owners[0]!
      key = keys[0]!
      paused = await cluster.replicasOf(killed)
      for (const replica of paused) replica.pause()
      await killed.kill()
    },
    release: async () => {
      for (const replica of paused) replica.resume()
      return eventually(async () => {
        const primary = await cluster.primaryOf(key)
        return primary !== killed && (await redisCall(primary.port, "CLUSTER", "INFO")).includes("cluster_state:ok") && primary
      }, "a replica to take the killed primary's slots")
    },
    subscribers: (server, channel) => numsub(server, "SHARDNUMSUB", channel),
    stop: cluster.stop
  }
}

const sentinelFailover = async (): Promise<Failover> => {
  const group = await startRedisSentinelGroup()
  let killed: RedisProcess | undefined
  const downAfter = (ms: number) =>
    Promise.all(group.sentinels.map((s) => redisCall(s.port, "SENTINEL", "SET", group.master, "down-after-milliseconds", String(ms))))
  return {
    mode: sentinelMode(group.addresses, group.master),
    together: async () => true,
    // The Sentinels are told to wait an hour before they call the primary down, then 1 s again
    // (pausing them instead would throw them into TILT mode for 30 s).
    kill: async () => {
      killed = await group.primary()
      await downAfter(3_600_000)
      await killed.kill()
    },
    release: async () => {
      await downAfter(1000)
      return eventually(async () => {
        const primary = await group.primary()
        return primary !== killed && (await redisCall(primary.port, "ROLE")).includes("master") && primary
      }, "the Sentinels to promote the replica")
    },
    subscribers: (server, channel) => numsub(server, "NUMSUB", channel),
    stop: group.stop
  }
}

const health = async (app: TestApp) => (await request(app, "GET", "/health")).body as { status: string; redis: string; websocket: { status: string } }

const cleanups: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {})
})

const scenario = (name: string, make: () => Promise<Failover>) =>
  it(`${name}: the primary killed under load — health, fail modes, then reconnection, broadcasts, session expiry and counts`, async () => {
    const failover = await make()
    cleanups.push(failover.stop)
    const prefix = `test-failover-${randomUUID().slice(0, 8)}:`
    const config = (failMode: "open" | "closed") => ({
      config: {
        redis: Option.some(failover.mode.target),
        redisKeyPrefix: prefix,
        rateLimitEnabled: true,
        rateLimitPerMinute: 100_000,
        rateLimitFailMode: failMode,
        wsMaxConnectionsPerUser: 2,
        wsSlotTtlSeconds: 3,
        wsSessionGraceSeconds: 0,
        auditLogEnabled: false
      }
    })
    const closed = await startTestApp(config("closed"))
    cleanups.push(closed.close)
    const open = await startTestApp(config("open"))
    cleanups.push(open.close)
    const apps = [closed, open] as const
    const probe = connectTo(failover.mode)
    cleanups.push(async () => probe.disconnect())

    // A user whose rate-limit window and connection slots live on the primary that is killed, with
    // the broadcast channel (in a cluster: the three keys hash to one primary).
    const channel = `${prefix}ws:broadcast`
    const keysOf = (name: string) => [channel, `${prefix}ratelimit:http:user:${name}`, `${prefix}ws:slots:${name}`]
    let user = "failover-0"
    for (let i = 1; !(await failover.together(keysOf(user))); i++) user = `failover-${i}`
    const tokens = await Promise.all(apps.map((app) => signToken(app, { sub: user, preferred_username: user, roles: ["get-authors", "create-author"] })))
    const readers = await Promise.all(apps.map((app) => signToken(app, { sub: `reader-${randomUUID()}`, preferred_username: "reader", roles: ["get-authors"] })))

    // Before: decisions from Redis on both; the user's two connections fill their limit; a
    // listener on each instance; a session that ends a few seconds from now.
    for (const [i, app] of apps.entries()) {
      const res = await request(app, "GET", "/authors?id=1", { token: tokens[i]! })
      expect(res.status).toBe(200)
      expect(res.headers.get("x-ratelimit-limit")).toBe("100010")
    }
    const clients: Array<WsClient> = []
    const connected = async (app: TestApp, token: string) => {
      const client = connectWs(app.url, { token })
      clients.push(client)
      expect((await client.request(1, { filters: { id: -1 } })).status_code).toBe(0)
      return client
    }
    cleanups.push(async () => clients.forEach((c) => c.ws.terminate()))
    const counted = await Promise.all(apps.map((app, i) => connected(app, tokens[i]!)))
    const listeners = await Promise.all(apps.map((app, i) => connected(app, readers[i]!)))
    const expiring = await connected(open, await signToken(open, { sub: `expiring-${randomUUID()}`, roles: ["get-authors"] }, { expiresIn: "8s" }))

    // Load on both instances throughout: every answer is a 200, or a 429 of the closed instance.
    const statuses: Array<string> = []
    let loading = true
    const load = (async () => {
      while (loading) {
        for (const [i, app] of apps.entries()) {
          const status = await request(app, "GET", "/authors?id=1", { token: tokens[i]! }).then((res) => res.status, (error: unknown) => String(error))
          statuses.push(`${i === 0 ? "closed" : "open"} ${status}`)
        }
      }
    })()
    cleanups.push(async () => {
      loading = false
      await load
    })

    await failover.kill(keysOf(user))

    // Meanwhile: unhealthy, and each instance's fail mode.
    for (const app of apps) await eventually(async () => (await health(app)).redis === "unhealthy", "/health to report redis unhealthy")
    const refused = await eventually(async () => {
      const res = await request(closed, "GET", "/authors?id=1", { token: tokens[0]! })
      return res.status === 429 && res
    }, "the closed instance to refuse while Redis cannot decide")
    expect(refused.body).toEqual({ detail: "Rate limit exceeded" })
    const admitted = await request(open, "GET", "/authors?id=1", { token: tokens[1]! })
    expect(admitted.status).toBe(200)
    expect(admitted.headers.get("x-ratelimit-limit")).toBeNull() // admitted without a decision

    const primary = await failover.release()

    // After: healthy, decisions from Redis again, on both.
    for (const app of apps) {
      await eventually(async () => {
        const report = await health(app)
        return report.status === "healthy" && report.redis === "healthy" && report.websocket.status === "healthy"
      }, "/health to be healthy again")
      await eventually(async () => {
        const res = await request(app, "GET", "/authors?id=1", { token: tokens[apps.indexOf(app)]! })
        return res.status === 200 && res.headers.get("x-ratelimit-limit") === "100010"
      }, "rate-limit decisions from Redis again")
    }
    loading = false
    await load
    expect(statuses.filter((s) => !["closed 200", "closed 429", "open 200"].includes(s)), "only 200s, and 429s of the closed instance").toEqual([])

    // Broadcasts: both instances subscribed on the new primary, then a write reaches both listeners.
    await eventually(async () => (await failover.subscribers(primary, channel)) >= 2, "both instances to subscribe on the new primary")
    const created = await request(closed, "POST", "/authors", { token: tokens[0]!, body: { name: `After failover ${randomUUID()}` } })
    expect(created.status).toBe(201)
    for (const listener of listeners) {
      expect((await listener.broadcasts.take()).data).toMatchObject({ event: "author.created", author: created.body as object })
    }

    // Sessions still expire.
    expect(await expiring.closed).toEqual({ code: 4001, reason: "Session expired" })

    // Counts heal: the new primary lost the user's leases (a replica that lagged), the instances
    // write them back, and the limit holds again.
    const slotsKey = `${prefix}ws:slots:${user}`
    await probe.del(slotsKey)
    await eventually(async () => (await probe.zcard(slotsKey)) === 2, "both leases written back")
    expect(await connectWs(closed.url, { token: tokens[0]! }).closed).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })
    await counted[0]!.close()
    await eventually(async () => (await probe.zcard(slotsKey)) === 1, "the closed connection's lease released")
    await connected(closed, tokens[0]!)
    console.log(`[failover] ${name}: ${statuses.length} requests during the test, ${statuses.filter((s) => s === "closed 429").length} refused by the closed instance meanwhile`)
  })

describe.runIf(onPath("redis-server"))("a Redis failover under load", () => {
  scenario("Redis Cluster", clusterFailover)
  scenario("Sentinel", sentinelFailover)
})
