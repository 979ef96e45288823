/**
 * docs/operations.md#redis-failover: a Sentinel failover announced while the service is asking the
 * Sentinels for the primary. One of the three Sentinels does not answer (frozen, as one on the
 * failed primary's host would be), so each reconnection spends up to a second asking it; the other
 * two promote the replica and announce it meanwhile. The service's connection and its subscriber
 * connection come back by themselves and take writes again (ioredis alone ends such a connection
 * for good: Store/Redis.ts). A private group (test/support/RedisTopology.ts); the test waits for
 * events, never for time.
 */
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, describe, expect, it } from "vitest"
import { RedisClient } from "../../src/Store/Redis.ts"
import { onPath } from "../support/Binaries.ts"
import { eventually } from "../support/Eventually.ts"
import { sentinelMode } from "../support/RedisModes.ts"
import { redisCall, startRedisSentinelGroup } from "../support/RedisTopology.ts"

const cleanups: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {})
})

describe.runIf(onPath("redis-server"))("a Sentinel failover while a Sentinel does not answer", () => {
  it("the service's connections come back on the promoted replica and take writes", async () => {
    const group = await startRedisSentinelGroup()
    cleanups.push(group.stop)
    const scope = Effect.runSync(Scope.make())
    cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
    const context = await Effect.runPromise(Layer.buildWithScope(RedisClient.layer(sentinelMode(group.addresses, group.master).target, `test-sentinel-${randomUUID()}:`), scope))
    const redis = Context.get(context, RedisClient)
    const subscriber = await Effect.runPromise(Scope.provide(redis.subscriber, scope))
    await subscriber.subscribe(["probe"])
    const writes = () => Effect.runPromise(Effect.exit(redis.writeCheck("probe", 10_000))).then(Exit.isSuccess)
    expect(await writes()).toBe(true)

    const killed = await group.primary()
    const [frozen, ...answering] = group.sentinels
    const downAfter = (ms: number, sentinels = group.sentinels) =>
      Promise.all(sentinels.map((s) => redisCall(s.port, "SENTINEL", "SET", group.master, "down-after-milliseconds", String(ms))))
    await downAfter(3_600_000)
    frozen!.pause()
    cleanups.push(async () => frozen!.resume())
    await killed.kill()
    await eventually(async () => !(await writes()), "writes to fail while no primary serves")
    // The answering Sentinels promote the replica and announce it, while the service's reconnections ask the frozen one.
    await downAfter(1000, answering)
    await eventually(writes, "writes to succeed again, on the promoted replica")
    await eventually(() => subscriber.connection.status === "ready", "the subscriber connection back")
    expect(await group.primary()).not.toBe(killed)
  })
})
