/**
 * The Redis implementation of `ConnectionRegistry` (docs/websocket.md#many-instances), for many instances. One module
 * on purpose (~300 lines): slots, broadcasts and sessions share the two connections and the
 * recovery on every reconnect, which is only correct when it restores all three together.
 *
 * - Slots: one sorted set per user, a member per connection scored by its lease's end. Acquiring
 *   is one Lua script (drop expired leases, count, admit): exact under concurrency and across
 *   instances. Each instance renews its leases every third of `slotTtlMs`, so a killed
 *   instance's slots free themselves within `slotTtlMs` (WS_SLOT_TTL_SECONDS, default 30 s).
 *   Leases are measured on Redis's clock (`TIME` inside the scripts), so instances whose clocks
 *   differ agree on when a lease ends. Renewing is a script too: a lease still there is extended;
 *   one that is gone (it ran out while this instance could not reach Redis, or Redis restarted) is
 *   put back only while the user has fewer than `max` — so a renewal after an outage never lifts a
 *   user above the limit. A connection left out stays open (it was admitted) and is counted again
 *   as soon as one of the user's slots frees.
 * - Broadcasts: PUBLISH on one channel; every instance (this one included) SUBSCRIBEs and
 *   delivers to its own connections. In a Redis Cluster, sharded pub/sub (SPUBLISH, SSUBSCRIBE):
 *   a broadcast goes to the primary holding the channel's slot and its subscribers, instead of
 *   being copied to every node over the cluster bus. Anyone who can reach Redis can publish on the channel: a
 *   message is forwarded only when it decodes as a broadcast (`BroadcastData`), else it is dropped,
 *   logged and counted (`ws_broadcasts_invalid_total`).
 * - Sessions: one key per connection with the session's expiry (PX); Redis's key-expiry event
 *   (`notify-keyspace-events Ex`) closes the connection on the instance that holds it. That
 *   instance also keeps a timer of its own per session, the backstop: `SESSION_BACKSTOP_MS` after
 *   the session's end it asks Redis for the key (PTTL) and closes the connection unless Redis holds
 *   a later end — and at once when Redis is unreachable. So no connection outlives its session
 *   whatever Redis does (restarted without the setting, events not permitted, down), and an
 *   extension made on either side (a re-auth frame moves the key and the timer) is honoured.
 *   The events are switched on with `CONFIG SET` only when `CONFIG GET` shows them off; where
 *   Redis refuses CONFIG (managed services, ACLs) the timer is the mode, armed at the session's
 *   end itself: a connection and its re-auth frames live on one instance, so its own timer is on
 *   time, and the startup log says which mode is used. A Redis Cluster is always in timer mode:
 *   each node sends its keys' expiry events to its own subscribers only, and following every
 *   primary through failovers and reshardings would buy nothing the timer does not give.
 * - Recovery: on every (re)connection of either connection (a Redis restart forgets a
 *   `CONFIG SET` and every key), this instance re-enables the key-expiry events (when CONFIG is
 *   permitted), subscribes its channels again (the subscriber connection is made without ioredis's own
 *   resubscribe, Store/Redis.ts `RedisSubscriber`; in a cluster ioredis subscribes again itself
 *   when another primary takes the channel's slot), and writes its slot leases and session keys back,
 *   so broadcasts, expiry events and the per-user limit work again at once.
 *
 * Every key and channel carries REDIS_KEY_PREFIX. Each script and command names one key (a user's
 * slots, one session), never a pipeline of several: in a Redis Cluster each runs on the primary of
 * its key's slot, and users spread over every primary (docs/configuration.md#redis-keys).
 */
import { Effect, FiberSet, Queue, Schedule } from "effect"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { AppConfig } from "../Config.ts"
import { wsBroadcastsInvalidTotal } from "../Observability/Metrics.ts"
import { COMMAND_TIMEOUT_MS, databaseOf, defineScript, isDisconnected, isReplyError, RedisClient, redisCommand, type RedisConnection } from "../Store/Redis.ts"
import { ACQUIRE_SLOT_LUA, parseBroadcast, RENEW_SLOTS_LUA } from "./RedisWire.ts"
import {
  type BroadcastMessage,
  type ConnectionRegistryShape,
  makeListeners,
  makeSessionTimers,
  RegistryUnavailable
} from "./RegistryBase.ts"

export interface RedisRegistryOptions {
  /** How long a slot outlives its instance's last renewal. */
  readonly slotTtlMs: number
}

/** `notify-keyspace-events` includes expired-key events ("E" + "x", or "A" which contains "x"). */
export const hasExpiredEvents = (flags: string) => flags.includes("E") && (flags.includes("x") || flags.includes("A"))

/**
 * How long after a session's end this instance's own timer steps in when Redis's expiry event has
 * not closed the connection (the events come from Redis's expiry cycle, ten times a second).
 */
export const SESSION_BACKSTOP_MS = 250

/** Own broadcasts remembered until their echo (see `ownEchoes`). */
const OWN_ECHOES_MAX = 1024

/**
 * Whether Redis sends this instance expired-key events: "on" (they were: left as they are),
 * "enabled" (this instance ran CONFIG SET), "refused" (off, and Redis refuses CONFIG — a managed
 * Redis, or an ACL without it), or "unanswered" (Redis did not answer: asked again on reconnection).
 */
export type ExpiredEvents =
  | { readonly state: "on" }
  | { readonly state: "enabled"; readonly flags: string }
  | { readonly state: "refused" | "unanswered"; readonly cause: unknown }

/** Turns on expired-key events unless CONFIG GET shows them on already. */
export const enableExpiredEvents = (client: RedisConnection): Effect.Effect<ExpiredEvents> =>
  Effect.gen(function*() {
    // A refusal is a mode, not an outage (managed Redis refuses CONFIG).
    const reply = yield* redisCommand("CONFIG GET", () => client.config("GET", "notify-keyspace-events"), COMMAND_TIMEOUT_MS * 2, { refusalExpected: true })
    const flags = Array.isArray(reply) && typeof reply[1] === "string" ? reply[1] : ""
    if (hasExpiredEvents(flags)) return { state: "on" } as const
    yield* redisCommand("CONFIG SET", () => client.config("SET", "notify-keyspace-events", `${flags}Ex`), COMMAND_TIMEOUT_MS * 2, { refusalExpected: true })
    return { state: "enabled", flags: `${flags}Ex` } as const
  }).pipe(Effect.catch((error) =>
    Effect.succeed({ state: isReplyError(error.cause) ? "refused" : "unanswered", cause: error.cause } as const)
  ))

export const makeRedisRegistry = (options: RedisRegistryOptions) =>
  Effect.gen(function*() {
    const redis = yield* RedisClient
    const { client, prefix } = redis
    /**
     * A Redis Cluster sends each key's expiry event from the node that holds the key, and only to
     * that node's subscribers: sessions end on this instance's timers there, which ask Redis for
     * the key at the session's end (docs/websocket.md#many-instances).
     */
    const expiryEvents = redis.mode !== "cluster"
    const acquireSlot = defineScript<number>(client, "adsAcquireSlot", 1, ACQUIRE_SLOT_LUA)
    const renewSlots = defineScript<Array<string>>(client, "adsRenewSlots", 1, RENEW_SLOTS_LUA)
    const instance = `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`
    const slotsKey = (userId: string) => `${prefix}ws:slots:${userId}`
    const sessionPrefix = `${prefix}ws:session:${instance}:`
    const sessionKey = (connectionId: string) => `${sessionPrefix}${connectionId}`
    const broadcastChannel = `${prefix}ws:broadcast`
    const expiredChannel = `__keyevent@${databaseOf(client)}__:expired`
    const fibers = yield* FiberSet.make()
    const run = yield* FiberSet.runtime(fibers)<never>()

    const listeners = makeListeners()
    /** member → its user's slots key and limit, for renewal and for release at shutdown. */
    const held = new Map<string, { readonly key: string; readonly max: number }>()
    const member = (connectionId: string) => `${instance}:${connectionId}`
    /** This instance's sessions: connection id → end (epoch ms), as the last start or extension set it. */
    const sessions = new Map<string, number>()
    /** Whether Redis is believed to send expiry events: the backstop then waits for them a little. */
    let keyEvents = false

    /** The session is over: the connection closes (once). */
    const expire = (connectionId: string) => {
      if (!sessions.delete(connectionId)) return
      timers.cancel(connectionId)
      listeners.expired(connectionId)
    }
    const putSession = (connectionId: string, endMs: number) =>
      Effect.suspend(() =>
        isDisconnected(client) ? Effect.void : redisCommand(
          "SET (session)",
          () => client.set(sessionKey(connectionId), "1", "PX", Math.max(1, Math.ceil(endMs - Date.now())))
        ).pipe(Effect.asVoid, Effect.ignore) // the backstop timer ends the session anyway
      )
    const arm = (connectionId: string, endMs: number) => timers.start(connectionId, endMs + (keyEvents ? SESSION_BACKSTOP_MS : 0))

    /**
     * The backstop: the session's end (and the slack for Redis's event) has passed and the
     * connection is still here. Redis decides while it answers — a key with time left is a later
     * end (the timer follows it), no key means the session is over; unreachable, it is over.
     */
    const backstop = (connectionId: string) =>
      run(Effect.gen(function*() {
        const end = sessions.get(connectionId)
        if (end === undefined) return
        const ttl = isDisconnected(client) ? -2 : yield* redisCommand(
          "PTTL (session)",
          () => client.pttl(sessionKey(connectionId))
        ).pipe(Effect.orElseSucceed(() => -2))
        if (sessions.get(connectionId) !== end) return // ended or extended meanwhile
        if (ttl > 0) {
          sessions.set(connectionId, Date.now() + ttl)
          return arm(connectionId, Date.now() + ttl)
        }
        expire(connectionId)
      }))
    const timers = makeSessionTimers(backstop)

    /**
     * Broadcasts this instance published, by their text, until their echo arrives: the echo is
     * delivered as the message it was made from, not decoded again. Bounded: an echo that never
     * comes (the subscriber was reconnecting) is forgotten after OWN_ECHOES_MAX newer ones.
     */
    const ownEchoes = new Map<string, BroadcastMessage>()
    const subscriber = yield* redis.subscriber
    subscriber.onMessage((channel, message) => {
      if (channel === broadcastChannel) {
        const own = ownEchoes.get(message)
        if (own !== undefined) {
          ownEchoes.delete(message)
          return listeners.broadcast(own)
        }
        // The channel is prefixed, but anyone who can reach Redis may publish on it.
        const broadcast = parseBroadcast(message)
        if (typeof broadcast !== "string") return listeners.broadcast(broadcast)
        wsBroadcastsInvalidTotal.inc()
        run(Effect.logWarning(`Broadcast channel message dropped: ${broadcast}`))
      } else if (channel === expiredChannel && message.startsWith(sessionPrefix)) {
        const connectionId = message.slice(sessionPrefix.length)
        const end = sessions.get(connectionId)
        // A key older than this instance's end (an extension whose SET did not reach Redis): put
        // the later end back rather than close a session that is not over.
        if (end !== undefined && end - Date.now() > SESSION_BACKSTOP_MS) run(putSession(connectionId, end))
        else expire(connectionId)
      }
    })
    const channels = expiryEvents ? [broadcastChannel, expiredChannel] : [broadcastChannel]
    const subscribe = redisCommand("SUBSCRIBE", () => subscriber.subscribe(channels), COMMAND_TIMEOUT_MS * 2).pipe(
      Effect.catch((error) => Effect.logWarning("Redis SUBSCRIBE failed; retried when the connection is back", error.cause))
    )

    /** Connections of this instance the last renewal could not count (their users were at the limit). */
    let lastUncounted = 0
    /** One script per user, sent together (auto-pipelined): leases extended, lost ones put back if they fit. */
    const renew = Effect.suspend(() => {
      if (held.size === 0 || isDisconnected(client)) return Effect.void
      const byKey = new Map<string, { max: number; members: Array<string> }>()
      for (const [m, { key, max }] of held) {
        const entry = byKey.get(key)
        if (entry === undefined) byKey.set(key, { max, members: [m] })
        else entry.members.push(m)
      }
      return redisCommand(
        "EVALSHA renew_slots",
        () => Promise.all([...byKey].map(([key, { max, members }]) => renewSlots(key, options.slotTtlMs, max, ...members))),
        COMMAND_TIMEOUT_MS * 2
      ).pipe(Effect.flatMap((left) => {
        const uncounted = left.reduce((n, members) => n + members.length, 0)
        const changed = uncounted !== lastUncounted
        lastUncounted = uncounted
        // Said once per change, not at every renewal.
        return uncounted === 0 || !changed ? Effect.void : Effect.logWarning(
          `${uncounted} WebSocket connection(s) of this instance not counted: their users hold WS_MAX_CONNECTIONS_PER_USER ` +
            "slots already (admitted while the registry could not decide, or their leases ran out); counted again when a slot frees"
        )
      }))
    }).pipe(Effect.catch((error) => Effect.logWarning("WebSocket slot leases not renewed", error.cause)))

    /** Session keys back into Redis (a restarted Redis has none): its events end them again. */
    const restoreSessions = Effect.suspend(() => {
      const now = Date.now()
      const live = [...sessions].filter(([, end]) => end > now)
      if (live.length === 0 || isDisconnected(client)) return Effect.void
      // Sent in one tick: one write (auto-pipelined; in a cluster, one per primary).
      return redisCommand(
        "SET (restore sessions)",
        () => Promise.all(live.map(([id, end]) => client.set(sessionKey(id), "1", "PX", Math.max(1, Math.ceil(end - now))))),
        COMMAND_TIMEOUT_MS * 2
      ).pipe(Effect.asVoid, Effect.catch((error) => Effect.logWarning("WebSocket session keys not restored", error.cause)))
    })

    /** What was last logged about the expiry mode: said once, and again only when it changes. */
    let said: "events" | "refused" | "unanswered" | undefined
    /** Key-expiry events on (when permitted), and which mode expires sessions, logged once per change. */
    const ensureExpiredEvents = Effect.gen(function*() {
      if (!expiryEvents) {
        if (said !== undefined) return
        said = "refused"
        return yield* Effect.logInfo(
          "WebSocket session expiry: this instance's timers (a Redis Cluster sends key-expiry events only to the node " +
            "holding the key; sessions end on time all the same)"
        )
      }
      const result = yield* enableExpiredEvents(client)
      const now = result.state === "on" || result.state === "enabled" ? "events" : result.state
      const hadEvents = keyEvents
      keyEvents = now === "events"
      // Events gone (a restart without the setting): the sessions' timers move to their ends.
      if (hadEvents && !keyEvents) for (const [id, end] of sessions) arm(id, end)
      if (result.state === "enabled" && said === "events") {
        return yield* Effect.logInfo("Redis key-expiry events enabled again (notify-keyspace-events was reset)")
      }
      if (now === said) return
      said = now
      switch (result.state) {
        case "on":
          return yield* Effect.logInfo(
            "WebSocket session expiry: Redis key-expiry events (notify-keyspace-events already includes them; left as it is)"
          )
        case "enabled":
          return yield* Effect.logInfo(
            `WebSocket session expiry: Redis key-expiry events (this instance set notify-keyspace-events to "${result.flags}")`
          )
        case "refused":
          // A mode, not a fault: Redis's reply says why, no stack trace.
          return yield* Effect.logInfo(
            "WebSocket session expiry: this instance's timers (Redis refuses CONFIG, as managed Redis services do; " +
              `sessions end on time all the same). Redis said: ${result.cause instanceof Error ? result.cause.message.trim() : String(result.cause)}`
          )
        case "unanswered":
          return yield* Effect.logWarning(
            "WebSocket session expiry: this instance's timers until Redis answers (key-expiry events could not be checked)",
            result.cause
          )
      }
    })

    /** Everything a Redis restart takes away, put back; run on every (re)connection. */
    const recover = Effect.gen(function*() {
      yield* ensureExpiredEvents
      if (subscriber.connection.status === "ready") yield* subscribe
      yield* renew
      yield* restoreSessions
    })

    yield* ensureExpiredEvents
    yield* subscribe

    // Either connection ready again (the first time included): one recovery pass per burst.
    const reconnected = yield* Queue.dropping<void>(1)
    const signal = () => {
      Queue.offerUnsafe(reconnected, undefined)
    }
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        client.on("ready", signal)
        subscriber.connection.on("ready", signal)
      }),
      () =>
        Effect.sync(() => {
          client.off("ready", signal)
          subscriber.connection.off("ready", signal)
        })
    )
    yield* Effect.forkScoped(Effect.forever(Effect.andThen(Queue.take(reconnected), recover)))
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
        sessions.clear()
        if (held.size === 0) return Effect.void
        const leases = [...held]
        held.clear()
        return redisCommand("ZREM (shutdown)", () => Promise.all(leases.map(([m, { key }]) => client.zrem(key, m)))).pipe(Effect.ignore)
      })
    )

    const registry: ConnectionRegistryShape & { readonly renewLeases: Effect.Effect<void> } = {
      acquire: (userId, connectionId, max) =>
        Effect.gen(function*() {
          const key = slotsKey(userId)
          const m = member(connectionId)
          // Undecided (Redis unreachable): the slot is held here and renewed into Redis once it is
          // back; the caller releases it if it refuses the connection (RATE_LIMIT_FAIL_MODE=closed).
          const undecided = (cause: unknown) =>
            Effect.andThen(Effect.sync(() => held.set(m, { key, max })), Effect.fail(new RegistryUnavailable({ cause })))
          if (isDisconnected(client)) return yield* undecided(new Error(`Redis ${client.status}`))
          const admitted = yield* redisCommand("EVALSHA acquire_slot", () => acquireSlot(key, options.slotTtlMs, max, m)).pipe(
            Effect.catch((error) => undecided(error.cause))
          )
          if (admitted === 1) held.set(m, { key, max })
          return admitted === 1
        }),
      release,
      // The timer first: whatever becomes of the SET, the session ends.
      startSession: (connectionId, expiresAtMs) =>
        Effect.suspend(() => {
          sessions.set(connectionId, expiresAtMs)
          arm(connectionId, expiresAtMs)
          return putSession(connectionId, expiresAtMs)
        }),
      endSession: (connectionId) =>
        Effect.suspend(() => {
          timers.cancel(connectionId)
          if (!sessions.delete(connectionId) || isDisconnected(client)) return Effect.void
          return redisCommand("DEL (session)", () => client.del(sessionKey(connectionId))).pipe(Effect.ignore)
        }),
      broadcast: (message) =>
        Effect.suspend(() => {
          const text = JSON.stringify(message)
          if (ownEchoes.size >= OWN_ECHOES_MAX) ownEchoes.delete(ownEchoes.keys().next().value!)
          ownEchoes.set(text, message)
          return redisCommand("PUBLISH", () => redis.publish(broadcastChannel, text)).pipe(
            Effect.tapError(() => Effect.sync(() => ownEchoes.delete(text)))
          )
        }).pipe(
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
        subscriber.connection.status === "ready" ? redis.ping : Effect.fail(new Error(`Redis subscriber ${subscriber.connection.status}`))
      ),
      localConnections: Effect.sync(() => held.size),
      // Not part of the interface: one renewal pass now (what the schedule runs), for tests.
      renewLeases: renew
    }
    return registry
  })

/** The Redis registry with WS_SLOT_TTL_SECONDS (`ConnectionRegistry.layerRedis`). */
export const makeRedisRegistryFromConfig = Effect.flatMap(AppConfig, (config) => makeRedisRegistry({ slotTtlMs: config.wsSlotTtlSeconds * 1000 }))
