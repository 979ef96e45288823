/**
 * `redisCommand`'s deadline (Store/Redis.ts): a command Redis does not answer in time fails with
 * `RedisTimeout` (a timer on the promise, not a forked race), an answer after that is ignored, and
 * a Redis that accepts connections but never answers makes the rate limiter unavailable — so
 * RATE_LIMIT_FAIL_MODE decides — instead of holding the request.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Option } from "effect"
import { createServer, type Socket } from "node:net"
import { makeRedisRateLimiter } from "../../src/RateLimit/RedisRateLimiter.ts"
import { makeRedis, RedisClient, redisCommand, RedisError, RedisTimeout } from "../../src/Store/Redis.ts"

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
      const redis = Layer.succeed(RedisClient, { client, prefix: "silent:", duplicate: Effect.succeed(client) })
      const limiter = yield* makeRedisRateLimiter.pipe(Effect.provide(redis))
      const exit = yield* Effect.exit(limiter.hit("http:user:u1", 10, 60_000))
      expect(Exit.isFailure(exit)).toBe(true)
      const error = failureOf(exit)
      expect(error?._tag).toBe("RateLimiterUnavailable")
      expect(error?.cause).toBeInstanceOf(RedisTimeout)
    }).pipe(Effect.scoped))
})
