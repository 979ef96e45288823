/**
 * docs/configuration.md#redis-cluster-and-sentinel: `REDIS_USERNAME` and `REDIS_PASSWORD` reach every
 * Redis node the service talks to, in each mode the run offers — a cluster's nodes included, which
 * the service finds only after connecting. An ACL user of the test's own is made on every node; the
 * rate limiter and the connection registry work with it, and the same user with a wrong password is
 * refused.
 */
import { Context, Effect, Exit, Layer, Option, Redacted } from "effect"
import { Cluster, type Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { describe, expect, it } from "vitest"
import type { RedisTarget } from "../../src/Config.ts"
import { RateLimiter } from "../../src/RateLimit/RateLimiter.ts"
import { RedisClient, type RedisConnection } from "../../src/Store/Redis.ts"
import { makeRedisRegistry } from "../../src/Ws/RedisRegistry.ts"
import { eventually } from "../support/Eventually.ts"
import { connectTo, redisModes } from "../support/RedisModes.ts"

/** Every node the service may reach: a cluster's primaries and replicas, else the one server (the Sentinels' primary). */
const nodesOf = async (admin: RedisConnection): Promise<ReadonlyArray<Redis | RedisConnection>> => {
  await eventually(() => admin.status === "ready", "the test's own connection")
  return admin instanceof Cluster ? admin.nodes("all") : [admin]
}

describe.runIf(redisModes.length > 0)("REDIS_USERNAME and REDIS_PASSWORD", () => {
  for (const mode of redisModes) {
    it(`${mode.name}: the service's ACL user on every node; a wrong password is refused`, async () => {
      const admin = connectTo(mode)
      const user = `test-acl-${randomUUID()}`
      const password = randomUUID()
      const nodes = await nodesOf(admin)
      try {
        await Promise.all(nodes.map((node) => node.call("ACL", "SETUSER", user, "on", `>${password}`, "~*", "&*", "+@all")))
        const as = (secret: string): RedisTarget => ({ ...mode.target, username: Option.some(user), password: Option.some(Redacted.make(secret)) })
        const prefix = `test-acl-${randomUUID()}:`
        await Effect.runPromise(Effect.gen(function*() {
          const context = yield* Layer.build(RateLimiter.layerRedis.pipe(Layer.provideMerge(RedisClient.layer(as(password), prefix))))
          const redis = Context.get(context, RedisClient)
          yield* redis.ping
          expect((yield* Context.get(context, RateLimiter).hit("acl", 5, 60_000)).remaining).toBe(4)
          const registry = yield* makeRedisRegistry({ slotTtlMs: 30_000 }).pipe(Effect.provideService(RedisClient, redis))
          expect(yield* registry.acquire(user, "c1", 1)).toBe(true)
          expect(yield* registry.acquire(user, "c2", 1)).toBe(false)
          // What it wrote is there.
          expect(yield* Effect.promise(() => admin.exists(`${prefix}ws:slots:${user}`))).toBe(1)

          const wrong = Context.get(yield* Layer.build(RedisClient.layer(as("wrong"), prefix)), RedisClient)
          expect(Exit.isFailure(yield* Effect.exit(wrong.ping))).toBe(true)
        }).pipe(Effect.scoped))
      } finally {
        await Promise.all(nodes.map((node) => node.call("ACL", "DELUSER", user).catch(() => 0)))
        admin.disconnect()
      }
    })
  }
})
