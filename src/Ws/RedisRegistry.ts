/**
 * The Redis implementation of `ConnectionRegistry` (CONTRACT §5), for many instances:
 *
 * - Slots: one sorted set per user, a member per connection scored by its lease's end. Acquiring
 *   is one Lua script (drop expired leases, count, admit): exact under concurrency and across
 *   instances. Each instance renews its leases every third of `slotTtlMs`, so a killed
 *   instance's slots free themselves within `slotTtlMs` (WS_SLOT_TTL_SECONDS, default 30 s).
 * - Broadcasts: PUBLISH on one channel; every instance (this one included) SUBSCRIBEs and
 *   delivers to its own connections.
 * - Sessions: one key per connection with the session's expiry (PX); Redis's key-expiry event
 *   (`notify-keyspace-events Ex`, enabled at startup when permitted) closes the connection on the
 *   instance that holds it. Where the events cannot be enabled, sessions fall back to this
 *   process's timers (the same instance holds the connection, so the outcome is the same).
 *
 * Every key and channel carries REDIS_KEY_PREFIX.
 */
import { Effect, Layer, Schedule } from "effect"
import type { Redis } from "ioredis"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { AppConfig } from "../Config.ts"
import { defineScript, isDisconnected, RedisClient, redisCommand } from "../Store/Redis.ts"
import {
  type BroadcastMessage,
  ConnectionRegistry,
  makeListeners,
  makeSessionTimers,
  RegistryUnavailable
} from "./Registry.ts"

/** KEYS[1] = the user's slots; ARGV = now (ms), lease (ms), max, member. Returns 1 when admitted. */
export const ACQUIRE_SLOT_LUA = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local member = ARGV[4]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if not redis.call('ZSCORE', key, member) and redis.call('ZCARD', key) >= max then return 0 end
redis.call('ZADD', key, now + lease, member)
redis.call('PEXPIRE', key, lease)
return 1
`

export interface RedisRegistryOptions {
  /** How long a slot outlives its instance's last renewal. */
  readonly slotTtlMs: number
}

/** `notify-keyspace-events` includes expired-key events ("E" + "x", or "A" which contains "x"). */
export const hasExpiredEvents = (flags: string) => flags.includes("E") && (flags.includes("x") || flags.includes("A"))

/** Turns on expired-key events if needed; false when they are off and CONFIG is not permitted. */
const enableExpiredEvents = (client: Redis) =>
  Effect.gen(function*() {
    const reply = yield* redisCommand("CONFIG GET", () => client.config("GET", "notify-keyspace-events"))
    const flags = Array.isArray(reply) && typeof reply[1] === "string" ? reply[1] : ""
    if (hasExpiredEvents(flags)) return true
    yield* redisCommand("CONFIG SET", () => client.config("SET", "notify-keyspace-events", `${flags}Ex`))
    return true
  }).pipe(
    Effect.catch((error) =>
      Effect.as(
        Effect.logWarning(
          "Redis key-expiry events are off and could not be enabled (set notify-keyspace-events to include Ex); " +
            "WebSocket sessions expire on this instance's timers instead",
          error.cause
        ),
        false
      )
    )
  )

export const makeRedisRegistry = (options: RedisRegistryOptions) =>
  Effect.gen(function*() {
    const { client, duplicate, prefix } = yield* RedisClient
    const acquireSlot = defineScript<number>(client, "adsAcquireSlot", 1, ACQUIRE_SLOT_LUA)
    const instance = `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`
    const slotsKey = (userId: string) => `${prefix}ws:slots:${userId}`
    const sessionPrefix = `${prefix}ws:session:${instance}:`
    const broadcastChannel = `${prefix}ws:broadcast`
    const expiredChannel = `__keyevent@${client.options.db ?? 0}__:expired`

    const listeners = makeListeners()
    const timers = makeSessionTimers(listeners.expired)
    /** member → slots key, for renewal and for release at shutdown. */
    const held = new Map<string, string>()
    const member = (connectionId: string) => `${instance}:${connectionId}`

    const keyEvents = yield* enableExpiredEvents(client)

    const subscriber = yield* duplicate
    subscriber.on("message", (channel: string, message: string) => {
      if (channel === broadcastChannel) {
        try {
          listeners.broadcast(JSON.parse(message) as BroadcastMessage)
        } catch {
          // not ours: the channel is prefixed, but anyone may publish on it
        }
      } else if (channel === expiredChannel && message.startsWith(sessionPrefix)) {
        listeners.expired(message.slice(sessionPrefix.length))
      }
    })
    yield* redisCommand("SUBSCRIBE", () => subscriber.subscribe(broadcastChannel, ...(keyEvents ? [expiredChannel] : []))).pipe(
      Effect.catch((error) => Effect.logWarning("Redis SUBSCRIBE failed; ioredis resubscribes when it reconnects", error.cause))
    )

    const renew = Effect.suspend(() => {
      if (held.size === 0 || isDisconnected(client)) return Effect.void
      const until = Date.now() + options.slotTtlMs
      return redisCommand("ZADD (renew leases)", () => {
        const pipeline = client.pipeline()
        for (const [m, key] of held) pipeline.zadd(key, until, m).pexpire(key, options.slotTtlMs)
        return pipeline.exec()
      }).pipe(Effect.asVoid)
    }).pipe(Effect.catch((error) => Effect.logWarning("WebSocket slot leases not renewed", error.cause)))
    yield* Effect.forkScoped(Effect.repeat(renew, Schedule.spaced(Math.max(100, Math.floor(options.slotTtlMs / 3)))))

    const release = (userId: string, connectionId: string) =>
      Effect.suspend(() => {
        const m = member(connectionId)
        if (!held.delete(m)) return Effect.void
        return redisCommand("ZREM", () => client.zrem(slotsKey(userId), m)).pipe(
          Effect.catch((error) => Effect.logWarning("WebSocket slot not released; its lease will expire", error.cause))
        )
      })

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        timers.clear()
        if (held.size === 0) return Effect.void
        return redisCommand("ZREM (shutdown)", () => {
          const pipeline = client.pipeline()
          for (const [m, key] of held) pipeline.zrem(key, m)
          held.clear()
          return pipeline.exec()
        }).pipe(Effect.ignore)
      })
    )

    return ConnectionRegistry.of({
      acquire: (userId, connectionId, max) =>
        Effect.gen(function*() {
          const key = slotsKey(userId)
          const m = member(connectionId)
          // Undecided (Redis unreachable): the slot is held here and renewed into Redis once it is
          // back; the caller releases it if it refuses the connection (RATE_LIMIT_FAIL_MODE=closed).
          const undecided = (cause: unknown) =>
            Effect.andThen(Effect.sync(() => held.set(m, key)), Effect.fail(new RegistryUnavailable(cause)))
          if (isDisconnected(client)) return yield* undecided(new Error(`Redis ${client.status}`))
          const admitted = yield* redisCommand("EVALSHA acquire_slot", () => acquireSlot(key, Date.now(), options.slotTtlMs, max, m), 1000).pipe(
            Effect.catch((error) => undecided(error.cause))
          )
          if (admitted === 1) held.set(m, key)
          return admitted === 1
        }),
      release,
      startSession: (connectionId, expiresAtMs) =>
        Effect.suspend(() => {
          if (!keyEvents) return Effect.sync(() => timers.start(connectionId, expiresAtMs))
          const ttl = Math.max(1, Math.ceil(expiresAtMs - Date.now()))
          return redisCommand("SET (session)", () => client.set(`${sessionPrefix}${connectionId}`, "1", "PX", ttl)).pipe(
            Effect.asVoid,
            // Redis unreachable: the session still ends, on this process's timer.
            Effect.catch(() => Effect.sync(() => timers.start(connectionId, expiresAtMs)))
          )
        }),
      endSession: (connectionId) =>
        Effect.suspend(() => {
          timers.cancel(connectionId)
          if (!keyEvents) return Effect.void
          return redisCommand("DEL (session)", () => client.del(`${sessionPrefix}${connectionId}`)).pipe(Effect.ignore)
        }),
      broadcast: (message) =>
        redisCommand("PUBLISH", () => client.publish(broadcastChannel, JSON.stringify(message))).pipe(
          Effect.asVoid,
          // Redis unreachable: this instance's clients still hear of the change.
          Effect.catch((error) =>
            Effect.andThen(
              Effect.logWarning("Broadcast not published to other instances (Redis unavailable)", error.cause),
              Effect.sync(() => listeners.broadcast(message))
            )
          )
        ),
      listen: (listener) => Effect.asVoid(listeners.add(listener)),
      check: Effect.suspend((): Effect.Effect<void, unknown> =>
        subscriber.status === "ready"
          ? Effect.asVoid(redisCommand("PING", () => client.ping()))
          : Effect.fail(new Error(`Redis subscriber ${subscriber.status}`))
      ),
      localConnections: Effect.sync(() => held.size)
    })
  })

export const RedisRegistryLive = Layer.effect(
  ConnectionRegistry,
  Effect.flatMap(AppConfig, (config) => makeRedisRegistry({ slotTtlMs: config.wsSlotTtlSeconds * 1000 }))
)
