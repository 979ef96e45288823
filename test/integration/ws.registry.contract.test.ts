/**
 * One contract suite for both `ConnectionRegistry` implementations (ARCHITECTURE habit 15): the
 * in-process maps and timers, and Redis (two registries on one prefix stand for two instances).
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Redacted, type Scope } from "effect"
import { randomUUID } from "node:crypto"
import { AppConfig } from "../../src/Config.ts"
import { RedisClient, redisLayer } from "../../src/Store/Redis.ts"
import { hasExpiredEvents, makeRedisRegistry, RedisRegistryLive } from "../../src/Ws/RedisRegistry.ts"
import { type BroadcastMessage, ConnectionRegistry, MemoryRegistryLive } from "../../src/Ws/Registry.ts"
import { TEST_REDIS_URL } from "../support/TestApp.ts"

type Registry = Context.Service.Shape<typeof ConnectionRegistry>

/** Builds `count` registries sharing one store (one for the in-process implementation). */
type Instances = (count: number) => Effect.Effect<ReadonlyArray<Registry>, never, Scope.Scope>

const message = (name: string): BroadcastMessage => ({
  event: "author.created",
  timestamp: new Date().toISOString(),
  author: { id: 1, name, created_at: "2026-01-01T00:00:00.000000" }
})

/** A listener whose broadcasts and expiries can be awaited. */
const listenTo = (registry: Registry) =>
  Effect.gen(function*() {
    const broadcasts: Array<BroadcastMessage> = []
    const expired: Array<string> = []
    const waiters: Array<() => void> = []
    const wake = () => waiters.splice(0).forEach((w) => w())
    yield* registry.listen({
      onBroadcast: (m) => {
        broadcasts.push(m)
        wake()
      },
      onSessionExpired: (id) => {
        expired.push(id)
        wake()
      }
    })
    const until = (done: () => boolean) =>
      Effect.callback<void>((resume) => {
        const check = () => (done() ? resume(Effect.void) : waiters.push(check))
        check()
      })
    return { broadcasts, expired, until }
  })

const contract = (name: string, instances: Instances) =>
  describe(`ConnectionRegistry contract: ${name}`, () => {
    it.live("admits up to max per user, refuses the next, frees a slot on release; re-acquiring is idempotent", () =>
      Effect.gen(function*() {
        const [a, b = a] = yield* instances(2)
        const user = `u-${randomUUID()}`
        expect(yield* a!.acquire(user, "c1", 3)).toBe(true)
        expect(yield* b!.acquire(user, "c2", 3)).toBe(true)
        expect(yield* a!.acquire(user, "c1", 3)).toBe(true) // same connection: no second slot
        expect(yield* a!.acquire(user, "c3", 3)).toBe(true)
        expect(yield* b!.acquire(user, "c4", 3)).toBe(false)
        expect(yield* a!.acquire(`other-${user}`, "c5", 3)).toBe(true) // users are independent
        yield* b!.release(user, "c2")
        yield* b!.release(user, "c2") // twice: no effect
        expect(yield* a!.acquire(user, "c6", 3)).toBe(true)
        expect(yield* a!.acquire(user, "c7", 3)).toBe(false)
        // a holds c1, c3, c6 and the other user's c5 (b's c2 was released, c4 refused)
        expect(yield* a!.localConnections).toBe(4)
      }).pipe(Effect.scoped))

    it.live("concurrent acquires of one user admit exactly max", () =>
      Effect.gen(function*() {
        const [a, b = a] = yield* instances(2)
        const user = `u-${randomUUID()}`
        const results = yield* Effect.all(
          Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a! : b!).acquire(user, `c${i}`, 5)),
          { concurrency: "unbounded" }
        )
        expect(results.filter((x) => x)).toHaveLength(5)
      }).pipe(Effect.scoped))

    it.live("a broadcast reaches every instance's listener, the sender's included", () =>
      Effect.gen(function*() {
        const registries = yield* instances(2)
        const listeners = yield* Effect.forEach(registries, listenTo)
        const sent = message(`b-${randomUUID()}`)
        yield* registries[0]!.broadcast(sent)
        for (const l of listeners) {
          yield* l.until(() => l.broadcasts.length > 0)
          expect(l.broadcasts).toEqual([sent])
        }
      }).pipe(Effect.scoped))

    it.live("a session expires on the instance that holds it; ended sessions never fire", () =>
      Effect.gen(function*() {
        const registries = yield* instances(2)
        const [holder, other] = yield* Effect.forEach(registries, listenTo)
        const cancelled = `cancelled-${randomUUID()}`
        const expiring = `expiring-${randomUUID()}`
        yield* registries[0]!.startSession(cancelled, Date.now() + 300)
        yield* registries[0]!.endSession(cancelled)
        yield* registries[0]!.startSession(expiring, Date.now() + 600)
        yield* holder!.until(() => holder!.expired.length > 0)
        expect(holder!.expired).toEqual([expiring])
        if (other !== undefined) {
          // Expiries and broadcasts travel in order: once the other instance has the next
          // broadcast, it would already have had the expiry.
          yield* registries[0]!.broadcast(message("after"))
          yield* other.until(() => other.broadcasts.length > 0)
          expect(other.expired).toEqual([])
        }
      }).pipe(Effect.scoped))

    it.live("a session is extended by starting it again", () =>
      Effect.gen(function*() {
        const [registry] = yield* instances(1)
        const l = yield* listenTo(registry!)
        const extended = `extended-${randomUUID()}`
        const control = `control-${randomUUID()}`
        yield* registry!.startSession(extended, Date.now() + 300)
        yield* registry!.startSession(extended, Date.now() + 60_000)
        yield* registry!.startSession(control, Date.now() + 900)
        yield* l.until(() => l.expired.includes(control))
        expect(l.expired).toEqual([control])
      }).pipe(Effect.scoped))
  })

contract("in-process", (count) =>
  Effect.gen(function*() {
    const registry = Context.get(yield* Layer.build(MemoryRegistryLive), ConnectionRegistry)
    return Array.from({ length: Math.min(count, 1) }, () => registry)
  }))

const redis = (prefix: string) => redisLayer(Redacted.make(TEST_REDIS_URL ?? ""), prefix)

describe.runIf(TEST_REDIS_URL !== undefined)("Redis", () => {
  const redisInstances = (slotTtlMs: number): Instances => (count) =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      return yield* Effect.forEach(Array.from({ length: count }), () =>
        Effect.map(
          Layer.build(Layer.effect(ConnectionRegistry, makeRedisRegistry({ slotTtlMs })).pipe(Layer.provide(redis(prefix)))),
          Context.get(ConnectionRegistry)
        ))
    })

  contract("Redis", redisInstances(30_000))

  it.live("the slots of an instance that vanished without releasing free themselves after the lease", () =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      const user = `u-${randomUUID()}`
      const survivor = Context.get(
        yield* Layer.build(Layer.effect(ConnectionRegistry, makeRedisRegistry({ slotTtlMs: 600 })).pipe(Layer.provide(redis(prefix)))),
        ConnectionRegistry
      )
      // The "crashed" instance: its connection is cut before its scope can release anything.
      const context = yield* Layer.build(
        Layer.effect(ConnectionRegistry, makeRedisRegistry({ slotTtlMs: 600 })).pipe(Layer.provideMerge(redis(prefix)))
      )
      const crashed = { registry: Context.get(context, ConnectionRegistry), client: Context.get(context, RedisClient).client }
      expect(yield* crashed.registry.acquire(user, "c1", 2)).toBe(true)
      expect(yield* crashed.registry.acquire(user, "c2", 2)).toBe(true)
      crashed.client.disconnect()
      expect(yield* survivor.acquire(user, "c3", 2)).toBe(false)
      // No event tells when a lease ends: ask until it has (600 ms lease; bounded wait).
      let admitted = false
      for (let i = 0; i < 100 && !admitted; i++) {
        admitted = yield* survivor.acquire(user, "c3", 2)
        if (!admitted) yield* Effect.sleep("50 millis")
      }
      expect(admitted).toBe(true)
      expect(yield* survivor.acquire(user, "c4", 2)).toBe(true)
      expect(yield* survivor.acquire(user, "c5", 2)).toBe(false)
    }).pipe(Effect.scoped))

  it.live("leases of a live instance are renewed: its slots stay counted past the lease", () =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      const build = () =>
        Effect.map(
          Layer.build(Layer.effect(ConnectionRegistry, makeRedisRegistry({ slotTtlMs: 300 })).pipe(Layer.provide(redis(prefix)))),
          Context.get(ConnectionRegistry)
        )
      const holder = yield* build()
      const other = yield* build()
      const user = `u-${randomUUID()}`
      expect(yield* holder.acquire(user, "c1", 1)).toBe(true)
      // Several leases long (renewed every 100 ms): still counted.
      yield* Effect.sleep("1 second")
      expect(yield* other.acquire(user, "c2", 1)).toBe(false)
    }).pipe(Effect.scoped))

  it.live("RedisRegistryLive enables key-expiry events (notify-keyspace-events gains Ex)", () =>
    Effect.gen(function*() {
      const layer = RedisRegistryLive.pipe(
        Layer.provideMerge(redis(`test-registry-${randomUUID()}:`)),
        Layer.provide(AppConfig.layerWith({ redisUrl: Option.some(Redacted.make(TEST_REDIS_URL ?? "")) }))
      )
      const context = yield* Layer.build(layer)
      const client = Context.get(context, RedisClient).client
      const reply = (yield* Effect.promise(() => client.config("GET", "notify-keyspace-events"))) as Array<string>
      expect(hasExpiredEvents(reply[1] ?? "")).toBe(true)
    }).pipe(Effect.scoped))
})

describe("hasExpiredEvents", () => {
  it("needs E and x (A includes x)", () => {
    expect(hasExpiredEvents("")).toBe(false)
    expect(hasExpiredEvents("Ex")).toBe(true)
    expect(hasExpiredEvents("KEA")).toBe(true)
    expect(hasExpiredEvents("Kx")).toBe(false)
    expect(hasExpiredEvents("Eg")).toBe(false)
  })
})
