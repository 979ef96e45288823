/**
 * One contract suite for both `ConnectionRegistry` implementations (docs/architecture.md#testing): the
 * in-process maps and timers, and Redis (two registries on one prefix stand for two instances) —
 * also a Redis that refuses CONFIG, as managed services do, where sessions expire on the holding
 * instance's timers instead of Redis's key-expiry events.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { vi } from "vitest"
import { Context, Effect, Layer, Option, type Scope } from "effect"
import { randomUUID } from "node:crypto"
import { AppConfig } from "../../src/Config.ts"
import { type RedisTarget, singleRedis } from "../../src/Config/Redis.ts"
import { registry as metricsRegistry } from "../../src/Observability/Metrics.ts"
import { RedisClient, type RedisConnection } from "../../src/Store/Redis.ts"
import { makeRedisRegistry } from "../../src/Ws/RedisRegistry.ts"
import { enableExpiredEvents, hasExpiredEvents } from "../../src/Ws/RedisSessions.ts"
import { ConnectionRegistry } from "../../src/Ws/Registry.ts"
import type { BroadcastMessage } from "../../src/Ws/RegistryBase.ts"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { onPath } from "../support/Binaries.ts"
import { readRegistry } from "../support/Metrics.ts"
import { type RedisServer, startRedisServer } from "../support/RedisServer.ts"
import { freePort } from "../support/Launcher.ts"
import { redisModes } from "../support/RedisModes.ts"
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
        // The end only has to come before the cancelled session's end; the expiring one ends after
        // that by construction (its end is taken later), so the cancelled one had its chance to fire.
        yield* registries[0]!.startSession(cancelled, Date.now() + 2_000)
        yield* registries[0]!.endSession(cancelled)
        yield* registries[0]!.startSession(expiring, Date.now() + 2_000)
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
        // The extension only has to come before the first end; the control session ends after that
        // end by construction (its end is taken later), so its expiry marks that the first end has passed.
        yield* registry!.startSession(extended, Date.now() + 2_000)
        yield* registry!.startSession(extended, Date.now() + 60_000)
        yield* registry!.startSession(control, Date.now() + 2_000)
        yield* l.until(() => l.expired.includes(control))
        expect(l.expired).toEqual([control])
      }).pipe(Effect.scoped))
  })

contract("in-process", (count) =>
  Effect.gen(function*() {
    const registry = Context.get(yield* Layer.build(ConnectionRegistry.layerMemory), ConnectionRegistry)
    return Array.from({ length: Math.min(count, 1) }, () => registry)
  }))

const redis = (prefix: string, target: RedisTarget = singleRedis(TEST_REDIS_URL ?? "")) => RedisClient.layer(target, prefix)

/** `count` Redis registries on one fresh prefix of the Redis `target()` names. */
const redisInstancesAt = (target: () => RedisTarget, slotTtlMs: number): Instances => (count) =>
  Effect.gen(function*() {
    const prefix = `test-registry-${randomUUID()}:`
    return yield* Effect.forEach(Array.from({ length: count }), () =>
      Effect.map(
        Layer.build(Layer.effect(ConnectionRegistry, makeRedisRegistry({ slotTtlMs })).pipe(Layer.provide(redis(prefix, target())))),
        Context.get(ConnectionRegistry)
      ))
  })

/** The JSON log lines written while `effect` runs (and by the fibers it forks). */
const capturingLogs = () => {
  const lines: Array<{ level: string; message: string }> = []
  const layer = layerLoggerTo("json", (line) => {
    const { level, message } = JSON.parse(line) as { level: string; message: unknown }
    // A line logged with its cause has [text, cause] as its message.
    lines.push({ level, message: String(Array.isArray(message) ? message[0] : message) })
  })
  const messages = (prefix: string) => lines.filter((l) => l.message.startsWith(prefix))
  return { layer, lines, messages }
}

/** The session-expiry mode lines (one per mode the registry settled on). */
const MODE_LINE = "WebSocket session expiry:"

/** Redis's clock, in ms (what the slot scripts measure leases on). */
const redisNow = (client: RedisConnection) =>
  Effect.promise(() => client.time()).pipe(Effect.map(([s, us]) => Number(s) * 1000 + Math.floor(Number(us) / 1000)))

/** A user's slots as Redis holds them: member → lease end (Redis ms). */
const slots = (client: RedisConnection, key: string) =>
  Effect.promise(() => client.zrange(key, 0, -1, "WITHSCORES")).pipe(Effect.map((flat) => {
    const out = new Map<string, number>()
    for (let i = 0; i < flat.length; i += 2) out.set(flat[i]!, Number(flat[i + 1]))
    return out
  }))

for (const mode of redisModes) describe(`Redis (${mode.name})`, () => {
  const redisInstances = (slotTtlMs: number) => redisInstancesAt(() => mode.target, slotTtlMs)

  /** One instance on `prefix` (a registry with its own Redis connection), and that connection. */
  const instance = (prefix: string, slotTtlMs: number) =>
    Effect.gen(function*() {
      const redisClient = Context.get(yield* Layer.build(redis(prefix, mode.target)), RedisClient)
      const registry = yield* makeRedisRegistry({ slotTtlMs }).pipe(Effect.provideService(RedisClient, redisClient))
      return { registry, client: redisClient.client, redis: redisClient }
    })

  contract(`Redis (${mode.name})`, redisInstances(30_000))

  it.live("the slots of an instance that vanished without releasing free themselves when their lease ends", () =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      const user = `u-${randomUUID()}`
      const survivor = yield* instance(prefix, 30_000)
      // The "crashed" instance: its connection is cut before its scope can release anything.
      // Its lease (3 s) only has to outlast the calls up to the survivor's refusal below.
      const crashed = yield* instance(prefix, 3_000)
      expect(yield* crashed.registry.acquire(user, "c1", 2)).toBe(true)
      expect(yield* crashed.registry.acquire(user, "c2", 2)).toBe(true)
      crashed.client.disconnect()
      expect(yield* survivor.registry.acquire(user, "c3", 2)).toBe(false)
      // No event marks a lease's end, but Redis holds it: wait until then (on Redis's clock), once.
      const ends = [...(yield* slots(survivor.client, `${prefix}ws:slots:${user}`)).values()]
      expect(ends).toHaveLength(2)
      yield* Effect.sleep(Math.max(...ends) - (yield* redisNow(survivor.client)) + 1)
      expect(yield* survivor.registry.acquire(user, "c3", 2)).toBe(true)
      expect(yield* survivor.registry.acquire(user, "c4", 2)).toBe(true)
      expect(yield* survivor.registry.acquire(user, "c5", 2)).toBe(false)
    }).pipe(Effect.scoped))

  it.live("leases are measured on Redis's clock, not the instance's", () =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      const { client, registry } = yield* instance(prefix, 30_000)
      const user = `u-${randomUUID()}`
      const before = yield* redisNow(client)
      // This instance's clock is an hour fast while it acquires.
      const now = Date.now
      const fast = vi.spyOn(Date, "now").mockImplementation(() => now() + 3_600_000)
      const admitted = yield* registry.acquire(user, "c1", 1).pipe(Effect.ensuring(Effect.sync(() => fast.mockRestore())))
      const after = yield* redisNow(client)
      expect(admitted).toBe(true)
      const [end] = [...(yield* slots(client, `${prefix}ws:slots:${user}`)).values()]
      expect(end).toBeGreaterThanOrEqual(before + 30_000)
      expect(end).toBeLessThanOrEqual(after + 30_000)
    }).pipe(Effect.scoped))

  it.live("a renewal extends a lease that is about to end, and puts back one that ended or that a restart lost", () =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      const holder = yield* instance(prefix, 30_000)
      const other = yield* instance(prefix, 30_000)
      const user = `u-${randomUUID()}`
      const key = `${prefix}ws:slots:${user}`
      expect(yield* holder.registry.acquire(user, "c1", 1)).toBe(true)
      const [member] = [...(yield* slots(holder.client, key)).keys()]
      // About to end: renewed to a whole lease from now.
      const soon = (yield* redisNow(holder.client)) + 1000
      yield* Effect.promise(() => holder.client.zadd(key, "XX", String(soon), member!))
      let before = yield* redisNow(holder.client)
      yield* holder.registry.renewLeases
      expect((yield* slots(holder.client, key)).get(member!)).toBeGreaterThanOrEqual(before + 30_000)
      // Ended (its instance could not reach Redis in time), nobody took the slot: put back.
      before = yield* redisNow(holder.client)
      yield* Effect.promise(() => holder.client.zadd(key, "XX", String(before - 1), member!))
      yield* holder.registry.renewLeases
      expect((yield* slots(holder.client, key)).get(member!)).toBeGreaterThanOrEqual(before + 30_000)
      expect(yield* other.registry.acquire(user, "c2", 1)).toBe(false)
      // Lost with every key (a Redis restart): put back.
      yield* Effect.promise(() => holder.client.del(key))
      yield* holder.registry.renewLeases
      expect([...(yield* slots(holder.client, key)).keys()]).toEqual([member])
      expect(yield* other.registry.acquire(user, "c2", 1)).toBe(false)
    }).pipe(Effect.scoped))

  it.live("after an outage a renewal never lifts a user above the limit: a lost lease comes back only when a slot is free", () =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      const a = yield* instance(prefix, 30_000)
      const b = yield* instance(prefix, 30_000)
      const user = `u-${randomUUID()}`
      const key = `${prefix}ws:slots:${user}`
      expect(yield* a.registry.acquire(user, "a1", 1)).toBe(true)
      const [aMember] = [...(yield* slots(a.client, key)).keys()]
      // a's lease ran out while a could not reach Redis; meanwhile b's user took the slot.
      const past = (yield* redisNow(a.client)) - 1
      yield* Effect.promise(() => a.client.zadd(key, "XX", String(past), aMember!))
      expect(yield* b.registry.acquire(user, "b1", 1)).toBe(true)
      const [bMember] = [...(yield* slots(b.client, key)).keys()].filter((m) => m !== aMember)
      // a is back: its renewal does not put its lease over b's.
      yield* a.registry.renewLeases
      expect([...(yield* slots(a.client, key)).keys()]).toEqual([bMember])
      // The same after a restart that lost every key, with both instances renewing.
      yield* Effect.promise(() => a.client.del(key))
      yield* Effect.all([a.registry.renewLeases, b.registry.renewLeases], { concurrency: "unbounded" })
      expect((yield* slots(a.client, key)).size).toBe(1)
      // Once the slot frees, a's connection is counted again (and holds the slot).
      yield* Effect.promise(() => a.client.del(key))
      yield* b.registry.release(user, "b1")
      yield* a.registry.renewLeases
      expect([...(yield* slots(a.client, key)).keys()]).toEqual([aMember])
      expect(yield* b.registry.acquire(user, "b2", 1)).toBe(false)
    }).pipe(Effect.scoped))

  it.live("only valid broadcasts published on the channel are delivered; the others are dropped and counted", () =>
    Effect.gen(function*() {
      const prefix = `test-registry-${randomUUID()}:`
      const { redis: { publish }, registry } = yield* instance(prefix, 30_000)
      const l = yield* listenTo(registry)
      const channel = `${prefix}ws:broadcast`
      // The subscription is in place once a message published now arrives (a SUBSCRIBE slowed by a
      // busy machine is retried by the registry): published until one is delivered.
      const ready = message(`ready-${randomUUID()}`)
      yield* Effect.promise(() => publish(channel, JSON.stringify(ready))).pipe(
        Effect.andThen(Effect.sleep("100 millis")),
        Effect.repeat({ until: () => l.broadcasts.length > 0 })
      )
      yield* l.until(() => l.broadcasts.length > 0)
      l.broadcasts.splice(0)
      const before = yield* Effect.promise(async () => (await readRegistry(metricsRegistry)).firstOrZero("ws_broadcasts_invalid_total"))
      const valid = message(`valid-${randomUUID()}`)
      const invalid = [
        "not json",
        JSON.stringify([valid]),
        JSON.stringify({ event: "author.created" }),
        JSON.stringify({ ...valid, event: "author.exploded" }),
        JSON.stringify({ ...valid, author: { ...valid.author, id: "1" } }),
        JSON.stringify({ ...valid, timestamp: "yesterday" }),
        JSON.stringify({ ...valid, author: { ...valid.author, name: "x".repeat(20_000) } })
      ]
      for (const text of invalid) yield* Effect.promise(() => publish(channel, text))
      // Extra fields are not forwarded.
      yield* Effect.promise(() => publish(channel, JSON.stringify({ ...valid, script: "<x>", author: { ...valid.author, secret: 1 } })))
      // Messages of one publisher arrive in order: once the last is delivered, the others were handled.
      yield* l.until(() => l.broadcasts.some((b) => b.author.name === valid.author.name))
      expect(l.broadcasts.filter((b) => b.author.name !== ready.author.name)).toEqual([valid])
      expect((yield* Effect.promise(async () => (await readRegistry(metricsRegistry)).firstOrZero("ws_broadcasts_invalid_total"))) - before).toBe(invalid.length)
    }).pipe(Effect.scoped))

})

describe.runIf(TEST_REDIS_URL !== undefined)("Redis (one server): key-expiry events", () => {
  it.live("ConnectionRegistry.layerRedis turns on key-expiry events on a Redis that has them off (notify-keyspace-events gains Ex)", () =>
    Effect.gen(function*() {
      // A Redis of its own: the shared one has had them turned on by every earlier test.
      const server = yield* Effect.acquireRelease(Effect.promise(() => startRedisServer()), (s) => Effect.promise(() => s.kill()))
      const flags = (client: RedisConnection) =>
        Effect.promise(() => client.config("GET", "notify-keyspace-events")).pipe(Effect.map((reply) => (reply as Array<string>)[1] ?? ""))
      const layer = ConnectionRegistry.layerRedis.pipe(
        Layer.provideMerge(RedisClient.layer(singleRedis(server.url), `test-registry-${randomUUID()}:`)),
        Layer.provide(AppConfig.layerTest({ redis: Option.some(singleRedis(server.url)) }))
      )
      const probe = Context.get(yield* Layer.build(redis("probe:", singleRedis(server.url))), RedisClient).client
      expect(hasExpiredEvents(yield* flags(probe))).toBe(false)
      const logs = capturingLogs()
      const registry = Context.get(yield* Layer.build(layer).pipe(Effect.provide(logs.layer)), ConnectionRegistry)
      expect(hasExpiredEvents(yield* flags(probe))).toBe(true)
      // Sessions end through the events; the mode is said once.
      const l = yield* listenTo(registry)
      yield* registry.startSession("events-mode", Date.now() + 300)
      yield* l.until(() => l.expired.includes("events-mode"))
      expect(logs.messages(MODE_LINE).map((line) => [line.level, line.message])).toEqual([
        ["INFO", "WebSocket session expiry: Redis key-expiry events (this instance set notify-keyspace-events to \"Ex\")"]
      ])
    }).pipe(Effect.scoped))

  it.live("a Redis whose key-expiry events are on already is left as it is: no CONFIG SET, the operator's flags kept", () =>
    Effect.gen(function*() {
      const server = yield* Effect.acquireRelease(
        Effect.promise(() => startRedisServer(["--notify-keyspace-events", "KEA"])),
        (s) => Effect.promise(() => s.kill())
      )
      const probe = Context.get(yield* Layer.build(redis("probe:", singleRedis(server.url))), RedisClient).client
      const flags = Effect.promise(() => probe.config("GET", "notify-keyspace-events")).pipe(Effect.map((reply) => (reply as Array<string>)[1]))
      const before = yield* flags
      const configSets = Effect.promise(() => probe.info("commandstats")).pipe(
        Effect.map((text) => Number(/cmdstat_config\|set:calls=(\d+)/.exec(text)?.[1] ?? 0))
      )
      const logs = capturingLogs()
      yield* Layer.build(Layer.effect(ConnectionRegistry, makeRedisRegistry({ slotTtlMs: 30_000 })).pipe(
        Layer.provide(redis(`test-registry-${randomUUID()}:`, singleRedis(server.url)))
      )).pipe(Effect.provide(logs.layer))
      expect(yield* flags).toBe(before)
      expect(yield* configSets).toBe(0)
      expect(logs.messages(MODE_LINE).map((line) => line.message)).toEqual([
        "WebSocket session expiry: Redis key-expiry events (notify-keyspace-events already includes them; left as it is)"
      ])
    }).pipe(Effect.scoped))

  it.live("a CONFIG refused by the ACL (NOPERM) is told apart from a Redis that does not answer", () =>
    Effect.gen(function*() {
      const admin = Context.get(yield* Layer.build(redis("probe:")), RedisClient).client
      const user = `test-noconfig-${randomUUID()}`
      const password = randomUUID()
      yield* Effect.acquireRelease(
        Effect.promise(() => admin.call("ACL", "SETUSER", user, "on", `>${password}`, "~*", "&*", "+@all", "-config")),
        () => Effect.promise(() => admin.call("ACL", "DELUSER", user))
      )
      const url = new URL(TEST_REDIS_URL ?? "")
      url.username = user
      url.password = password
      const limited = Context.get(yield* Layer.build(redis("probe:", singleRedis(url.toString()))), RedisClient).client
      const refused = yield* enableExpiredEvents(limited)
      expect(refused.state).toBe("refused")
      expect(String((refused as { cause: unknown }).cause)).toMatch(/NOPERM/)
      const port = yield* Effect.promise(() => freePort())
      const nobody = Context.get(yield* Layer.build(redis("probe:", singleRedis(`redis://127.0.0.1:${port}/0`))), RedisClient).client
      expect((yield* enableExpiredEvents(nobody)).state).toBe("unanswered")
    }).pipe(Effect.scoped))
})

// A private `redis-server`, started with CONFIG renamed away as managed Redis services do; on a
// machine with only Node there is none (`.ci/run` installs it).
describe.runIf(onPath("redis-server"))("Redis that refuses CONFIG", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer(["--rename-command", "CONFIG", ""])
  })
  afterAll(() => server?.kill())

  // The whole contract holds: sessions end on the holding instance, re-auth extensions included.
  contract("Redis refusing CONFIG (sessions on the instance's timers)", redisInstancesAt(() => singleRedis(server.url), 30_000))

  it.live("says once that sessions expire on this instance's timers, and a session still ends at its end", () =>
    Effect.gen(function*() {
      const probe = Context.get(yield* Layer.build(redis("probe:", singleRedis(server.url))), RedisClient).client
      const refused = yield* enableExpiredEvents(probe)
      expect(refused.state).toBe("refused")
      expect(String((refused as { cause: unknown }).cause)).toMatch(/unknown command/i)
      const logs = capturingLogs()
      const [registry] = yield* redisInstancesAt(() => singleRedis(server.url), 30_000)(1).pipe(Effect.provide(logs.layer))
      const l = yield* listenTo(registry!)
      const end = Date.now() + 500
      yield* registry!.startSession("timer-mode", end)
      yield* l.until(() => l.expired.includes("timer-mode"))
      console.log(`[registry] CONFIG refused: session ended ${Date.now() - end} ms after its end`)
      expect(l.expired).toEqual(["timer-mode"])
      expect(logs.messages(MODE_LINE).map((line) => [line.level, line.message])).toEqual([[
        "INFO",
        "WebSocket session expiry: this instance's timers (Redis refuses CONFIG, as managed Redis services do; sessions end on time all the same). " +
          "Redis said: ERR unknown command 'config', with args beginning with: 'GET' 'notify-keyspace-events'"
      ]])
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
