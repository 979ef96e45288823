/**
 * `redisCommand`'s deadline (Store/Redis.ts): a command Redis does not answer in time fails with
 * `RedisTimeout` (a timer on the promise, not a forked race) — every command, with
 * COMMAND_TIMEOUT_MS when its caller names none — an answer after that is ignored, and
 * a Redis that accepts connections but never answers makes the rate limiter unavailable — so
 * RATE_LIMIT_FAIL_MODE decides — instead of holding the request; once the silence outlasts
 * SOCKET_TIMEOUT_MS the connection counts as down and the limiter fails at once. With a real
 * Redis: the limiter's window runs on Redis's clock (TIME), not the instance's.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Option } from "effect"
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { createServer, type Socket } from "node:net"
import { vi } from "vitest"
import { makeRedisRateLimiter } from "../../src/RateLimit/RedisRateLimiter.ts"
import {
  COMMAND_TIMEOUT_MS,
  isDisconnected,
  makeRedis,
  RedisClient,
  redisCommand,
  RedisError,
  RedisTimeout
} from "../../src/Store/Redis.ts"
import { eventually } from "../support/Eventually.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { TEST_REDIS_URL } from "../support/TestApp.ts"

const failureOf = <A, E>(exit: Exit.Exit<A, E>) => Option.getOrUndefined(Exit.findErrorOption(exit))

describe("redisCommand", () => {
  it.effect("answers what Redis answered", () =>
    Effect.gen(function*() {
      expect(yield* redisCommand("GET", () => Promise.resolve("value"), 1000)).toBe("value")
    }))

  it.effect("a command not answered by its deadline fails with RedisTimeout; the late answer is ignored", () =>
    Effect.gen(function*() {
      let answer: (value: string) => void = () => {}
      const pending = new Promise<string>((resolve) => (answer = resolve))
      const exit = yield* Effect.exit(redisCommand("GET", () => pending, 20))
      answer("late")
      const error = failureOf(exit)
      expect(error).toBeInstanceOf(RedisError)
      expect(error?.command).toBe("GET")
      expect(error?.cause).toBeInstanceOf(RedisTimeout)
    }))

  it.live("a command whose caller names no deadline gets COMMAND_TIMEOUT_MS", () =>
    Effect.gen(function*() {
      const error = failureOf(yield* Effect.exit(redisCommand("PUBLISH", () => new Promise<number>(() => {}))))
      expect(error?.cause).toBeInstanceOf(RedisTimeout)
      expect((error?.cause as RedisTimeout).ms).toBe(COMMAND_TIMEOUT_MS)
    }))

  it.effect("a rejected or throwing command fails with RedisError carrying the cause", () =>
    Effect.gen(function*() {
      const rejected = failureOf(yield* Effect.exit(redisCommand("GET", () => Promise.reject(new Error("WRONGTYPE")), 1000)))
      expect((rejected?.cause as Error).message).toBe("WRONGTYPE")
      const thrown = failureOf(yield* Effect.exit(redisCommand("GET", () => {
        throw new Error("bad arguments")
      })))
      expect((thrown?.cause as Error).message).toBe("bad arguments")
    }))
})

describe("a Redis that accepts connections and never answers", () => {
  it.live("the rate limiter reports itself unavailable (RATE_LIMIT_FAIL_MODE decides) instead of waiting", () =>
    Effect.gen(function*() {
      const sockets = new Set<Socket>()
      const silent = createServer((socket) => {
        sockets.add(socket)
        socket.on("error", () => {})
      })
      const port = yield* Effect.callback<number>((resume) => {
        silent.listen(0, "127.0.0.1", () => {
          const address = silent.address()
          resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 0))
        })
      })
      yield* Effect.addFinalizer(() =>
        Effect.callback<void>((resume) => {
          sockets.forEach((s) => s.destroy())
          silent.close(() => resume(Effect.void))
        })
      )
      const client = makeRedis(`redis://127.0.0.1:${port}`)
      client.on("error", () => {})
      yield* Effect.addFinalizer(() => Effect.sync(() => client.disconnect()))
      const redis = Layer.succeed(RedisClient, RedisClient.make(client, "silent:"))
      const limiter = yield* makeRedisRateLimiter.pipe(Effect.provide(redis))
      const exit = yield* Effect.exit(limiter.hit("http:user:u1", 10, 60_000))
      expect(Exit.isFailure(exit)).toBe(true)
      const error = failureOf(exit)
      expect(error?._tag).toBe("RateLimiterUnavailable")
      expect(error?.cause).toBeInstanceOf(RedisTimeout)
    }).pipe(Effect.scoped))
})

describe.runIf(TEST_REDIS_URL !== undefined)("with a real Redis", () => {
  it.live("a Redis that stops answering (blackholed) counts as down once the silence outlasts SOCKET_TIMEOUT_MS: the limiter then fails at once", () =>
    Effect.gen(function*() {
      const { host, port } = hostPort(TEST_REDIS_URL!)
      const proxy = yield* Effect.promise(() => startTcpProxy(host, port))
      yield* Effect.addFinalizer(() => Effect.promise(() => proxy.close()))
      const client = makeRedis(viaProxy(TEST_REDIS_URL!, proxy))
      client.on("error", () => {})
      yield* Effect.addFinalizer(() => Effect.sync(() => client.disconnect()))
      const redis = Layer.succeed(RedisClient, RedisClient.make(client, `blackholed:${randomUUID()}:`))
      const limiter = yield* makeRedisRateLimiter.pipe(Effect.provide(redis))
      expect((yield* limiter.hit("k", 10, 60_000)).allowed).toBe(true)
      proxy.blackhole()
      // Still "ready": the first hit waits for its deadline.
      const first = failureOf(yield* Effect.exit(limiter.hit("k", 10, 60_000)))
      expect(first?.cause).toBeInstanceOf(RedisTimeout)
      yield* Effect.promise(() => eventually(() => isDisconnected(client), "the silent connection to be dropped"))
      const next = failureOf(yield* Effect.exit(limiter.hit("k", 10, 60_000)))
      expect(next?._tag).toBe("RateLimiterUnavailable")
      expect(next?.cause).not.toBeInstanceOf(RedisTimeout) // refused at once, not after a deadline
      console.log(`[redis] blackholed: first hit ${String(first?.cause)}; then ${String(next?.cause)} (status ${client.status})`)
      // Back once Redis answers again.
      yield* Effect.promise(() => proxy.restore())
      yield* Effect.promise(() => eventually(() => client.status === "ready", "the reconnection"))
      expect((yield* limiter.hit("k", 10, 60_000)).allowed).toBe(true)
    }).pipe(Effect.scoped))

  it.live("the sliding window runs on Redis's clock (TIME): an instance whose clock is 10 minutes ahead scores its hit at Redis's time", () =>
    Effect.gen(function*() {
      const client = makeRedis(TEST_REDIS_URL!)
      client.on("error", () => {})
      yield* Effect.addFinalizer(() => Effect.sync(() => client.disconnect()))
      const probe = new Redis(TEST_REDIS_URL!)
      yield* Effect.addFinalizer(() => Effect.sync(() => probe.disconnect()))
      const prefix = `clock:${randomUUID()}:`
      const limiter = yield* makeRedisRateLimiter.pipe(Effect.provide(Layer.succeed(RedisClient, RedisClient.make(client, prefix))))
      const realNow = Date.now
      const skewMs = 10 * 60_000
      const skewed = vi.spyOn(Date, "now").mockImplementation(() => realNow() + skewMs)
      const decision = yield* limiter.hit("skewed", 5, 60_000).pipe(Effect.ensuring(Effect.sync(() => skewed.mockRestore())))
      const [seconds, micros] = yield* Effect.promise(() => probe.time())
      const redisNow = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
      const scores = yield* Effect.promise(() => probe.zrange(`${prefix}ratelimit:skewed`, 0, -1, "WITHSCORES"))
      const score = Number(scores[1])
      console.log(`[redis] hit scored ${redisNow - score} ms before Redis's now; the instance's clock was ${skewMs} ms ahead`)
      expect(decision).toMatchObject({ allowed: true, remaining: 4, resetSeconds: 60 })
      // Scored at Redis's time (moments ago), not 10 minutes in the future.
      expect(Math.abs(redisNow - score)).toBeLessThan(skewMs / 2)
    }).pipe(Effect.scoped))
})
