/**
 * docs/configuration.md#redis-cluster-and-sentinel: `REDIS_USERNAME` and `REDIS_PASSWORD` reach every
 * Redis node the service talks to, in each mode the run offers — a cluster's nodes included, which
 * the service finds only after connecting. An ACL user of the test's own is made on every node; the
 * rate limiter, the connection registry and the whole service work with it, the same user with a
 * wrong password is refused, and the startup log names the mode without the password.
 */
import { Context, Effect, Exit, Layer, Option, Redacted } from "effect"
import { Cluster, type Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { describe, expect, it } from "vitest"
import type { RedisTarget } from "../../src/Config/Redis.ts"
import { RateLimiter } from "../../src/RateLimit/RateLimiter.ts"
import { RedisClient, type RedisConnection } from "../../src/Store/Redis.ts"
import { makeRedisRegistry } from "../../src/Ws/RedisRegistry.ts"
import { eventually } from "../support/Eventually.ts"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { connectTo, type RedisModeName, redisModes } from "../support/RedisModes.ts"
import { request, signToken, startTestApp } from "../support/TestApp.ts"

/** Every node the service may reach: a cluster's primaries and replicas, else the one server (the Sentinels' primary). */
const nodesOf = async (admin: RedisConnection): Promise<ReadonlyArray<Redis | RedisConnection>> => {
  await eventually(() => admin.status === "ready", "the test's own connection")
  return admin instanceof Cluster ? admin.nodes("all") : [admin]
}

/** What the startup log says of each mode. */
const STARTUP_LINE: Record<RedisModeName, RegExp> = {
  "one server": /^Redis: one server$/,
  "Redis Cluster": /^Redis: a Redis Cluster \(seeds 127\.0\.0\.1:\d+.*\)/,
  Sentinel: /^Redis: the primary of Sentinel group "[^"]+" \(Sentinels 127\.0\.0\.1:\d+/
}

describe.runIf(redisModes.length > 0)("REDIS_USERNAME and REDIS_PASSWORD", () => {
  for (const mode of redisModes) {
    it(`${mode.name}: the service's ACL user on every node; a wrong password is refused; the startup line names the mode, not the password`, async () => {
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

        // The service with it: answers with decisions from Redis; its startup line names the mode, never the password.
        const lines: Array<string> = []
        const app = await startTestApp({
          config: { redis: Option.some(as(password)), redisKeyPrefix: prefix, rateLimitEnabled: true },
          logLevel: "Info",
          logger: layerLoggerTo("json", (line) => lines.push(line))
        })
        try {
          const res = await request(app, "GET", "/authors?id=1", { token: await signToken(app, { sub: user, roles: ["get-authors"] }) })
          expect(res.status).toBe(200)
          expect(res.headers.get("x-ratelimit-limit")).not.toBeNull()
          expect((await request(app, "GET", "/health")).body).toMatchObject({ status: "healthy", redis: "healthy" })
        } finally {
          await app.close()
        }
        const startup = lines.map((line) => String((JSON.parse(line) as { message: unknown }).message)).filter((m) => m.startsWith("Redis: "))
        expect(startup).toEqual([expect.stringMatching(STARTUP_LINE[mode.name])])
        expect(lines.filter((line) => line.includes(password))).toEqual([])
      } finally {
        await Promise.all(nodes.map((node) => node.call("ACL", "DELUSER", user).catch(() => 0)))
        admin.disconnect()
      }
    })
  }
})
