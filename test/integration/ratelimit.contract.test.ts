/**
 * One contract suite for both `RateLimiter` implementations (docs/architecture.md#testing): the
 * in-process sliding window and the Redis Lua script, driven by the same TestClock — the script on
 * each Redis mode the run offers (one server, a Redis Cluster, a Sentinel group: RedisModes.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { TestClock } from "effect/testing"
import { randomUUID } from "node:crypto"
import { RateLimiter } from "../../src/RateLimit/RateLimiter.ts"
import { RedisClient } from "../../src/Store/Redis.ts"
import { type RedisMode, redisModes } from "../support/RedisModes.ts"

const redisLimiter = (mode: RedisMode) => () => RateLimiter.layerRedis.pipe(Layer.provide(RedisClient.layer(mode.target, `test:${randomUUID()}:`)))

const hits = (key: string, n: number, limit: number, windowMs = 60_000) =>
  Effect.flatMap(RateLimiter, (limiter) =>
    Effect.forEach(Array.from({ length: n }), () => limiter.hit(key, limit, windowMs), { concurrency: 1 }))

const contract = (name: string, layer: () => Layer.Layer<RateLimiter>) =>
  describe(`RateLimiter contract: ${name}`, () => {
    it.effect("admits exactly limit + burst in the window, with the documented header values", () =>
      Effect.gen(function*() {
        // 5 per minute + 2 burst: the headers go 6…0 and the 8th is refused.
        const decisions = yield* hits("k1", 8, 7)
        expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, true, true, false])
        expect(decisions.map((d) => d.remaining)).toEqual([6, 5, 4, 3, 2, 1, 0, 0])
        expect(decisions[0]!.resetSeconds).toBe(60)
        expect(decisions[7]!.retryAfterSeconds).toBe(60)
        expect(decisions.every((d) => d.limit === 7)).toBe(true)
      }).pipe(Effect.provide(layer())))

    it.effect("slides: a slot frees exactly when the oldest admitted hit leaves the window", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiter
        yield* limiter.hit("k2", 3, 60_000) // t = 0
        yield* TestClock.adjust("20 seconds")
        yield* limiter.hit("k2", 3, 60_000) // t = 20 s
        yield* limiter.hit("k2", 3, 60_000)
        const refused = yield* limiter.hit("k2", 3, 60_000)
        expect(refused.allowed).toBe(false)
        expect(refused.retryAfterSeconds).toBe(40)
        yield* TestClock.adjust("39999 millis")
        expect((yield* limiter.hit("k2", 3, 60_000)).allowed).toBe(false)
        yield* TestClock.adjust("1 millis") // t = 60 s: the hit of t = 0 has left
        const admitted = yield* limiter.hit("k2", 3, 60_000)
        expect(admitted.allowed).toBe(true)
        expect(admitted.remaining).toBe(0)
        expect(admitted.resetSeconds).toBe(20) // the oldest now (t = 20 s) leaves at t = 80 s
        expect((yield* limiter.hit("k2", 3, 60_000)).allowed).toBe(false)
      }).pipe(Effect.provide(layer())))

    it.effect("refused hits do not count; keys are independent", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiter
        yield* hits("a", 10, 2)
        yield* TestClock.adjust("60 seconds")
        // Ten hits earlier, only two were admitted: after one window all are gone.
        expect((yield* hits("a", 3, 2)).map((d) => d.allowed)).toEqual([true, true, false])
        expect((yield* limiter.hit("b", 2, 60_000)).allowed).toBe(true)
      }).pipe(Effect.provide(layer())))

    it.effect("reserve: admits like hit; release takes that admission back, and only it", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiter
        const first = yield* limiter.reserve("r1", 2, 60_000)
        const second = yield* limiter.reserve("r1", 2, 60_000)
        expect([first.decision.allowed, second.decision.allowed]).toEqual([true, true])
        expect(second.decision.remaining).toBe(0)
        const refused = yield* limiter.reserve("r1", 2, 60_000)
        expect(refused.decision).toMatchObject({ allowed: false, retryAfterSeconds: 60 })
        yield* refused.release // a refused hit has nothing to take back
        expect((yield* limiter.hit("r1", 2, 60_000)).allowed).toBe(false)
        yield* first.release
        yield* first.release // twice is once
        const again = yield* limiter.hit("r1", 2, 60_000)
        expect(again).toMatchObject({ allowed: true, remaining: 0 })
        expect((yield* limiter.hit("r1", 2, 60_000)).allowed).toBe(false)
      }).pipe(Effect.provide(layer())))

    it.effect("reserve under concurrency: never more than the limit, whatever is released later", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiter
        const reservations = yield* Effect.all(
          Array.from({ length: 40 }, () => limiter.reserve("r2", 5, 60_000)),
          { concurrency: "unbounded" }
        )
        const admitted = reservations.filter((r) => r.decision.allowed)
        expect(admitted).toHaveLength(5)
        yield* Effect.forEach(admitted.slice(0, 2), (r) => r.release, { concurrency: "unbounded" })
        const next = yield* Effect.all(Array.from({ length: 10 }, () => limiter.hit("r2", 5, 60_000)), { concurrency: "unbounded" })
        expect(next.filter((d) => d.allowed)).toHaveLength(2)
      }).pipe(Effect.provide(layer())))

    it.effect("keys of different windows share the store: a 15-minute key outlives 60-second traffic", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiter
        const long = 15 * 60_000
        expect((yield* limiter.hit("long", 1, long)).allowed).toBe(true)
        for (let i = 0; i < 5; i++) {
          yield* TestClock.adjust("2 minutes")
          yield* limiter.hit(`short-${i}`, 5, 60_000)
        }
        // t = 10 min: the long key's hit is still in its window.
        const refused = yield* limiter.hit("long", 1, long)
        expect(refused).toMatchObject({ allowed: false, retryAfterSeconds: 300 })
        yield* TestClock.adjust("5 minutes")
        expect((yield* limiter.hit("long", 1, long)).allowed).toBe(true)
      }).pipe(Effect.provide(layer())))

    it.effect("hits in the same millisecond are distinct admissions", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiter
        const decisions = yield* Effect.all(Array.from({ length: 50 }, () => limiter.hit("same", 20, 60_000)), { concurrency: "unbounded" })
        expect(decisions.filter((d) => d.allowed)).toHaveLength(20)
      }).pipe(Effect.provide(layer())))
  })

contract("in-process", () => RateLimiter.layerMemory)

for (const mode of redisModes) describe(`Redis (${mode.name})`, () => {
  contract(`Redis (${mode.name})`, redisLimiter(mode))

  it.live("two instances (two connections) share one budget, exactly, under 200 concurrent hits", () =>
    Effect.gen(function*() {
      const prefix = `test:${randomUUID()}:`
      const instance = () => RateLimiter.layerRedis.pipe(Layer.provide(RedisClient.layer(mode.target, prefix)))
      const a = Context.get(yield* Layer.build(instance()), RateLimiter)
      const b = Context.get(yield* Layer.build(instance()), RateLimiter)
      const decisions = yield* Effect.all(
        Array.from({ length: 200 }, (_, i) => (i % 2 === 0 ? a : b).hit("shared", 70, 60_000)),
        { concurrency: "unbounded" }
      )
      expect(decisions.filter((d) => d.allowed)).toHaveLength(70)
    }).pipe(Effect.scoped))
})
