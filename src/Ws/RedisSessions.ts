/**
 * The connection registry's sessions in Redis (docs/websocket.md#many-instances): when each of this
 * instance's connections must close (token exp + WS_SESSION_GRACE_SECONDS), ended by Redis's
 * key-expiry events where they come, and by this instance's own timers always.
 *
 * One key per connection with the session's expiry (PX); Redis's key-expiry event
 * (`notify-keyspace-events Ex`) closes the connection on the instance that holds it. That instance
 * also keeps a timer of its own per session, the backstop: `SESSION_BACKSTOP_MS` after the
 * session's end it asks Redis for the key (PTTL) and closes the connection unless Redis holds a
 * later end — and at once when Redis is unreachable. So no connection outlives its session
 * whatever Redis does (restarted without the setting, events not permitted, down), and an
 * extension made on either side (a re-auth frame moves the key and the timer) is honoured.
 *
 * The events are switched on with `CONFIG SET` only when `CONFIG GET` shows them off; where Redis
 * refuses CONFIG (managed services, ACLs) the timer is the mode, armed at the session's end
 * itself: a connection and its re-auth frames live on one instance, so its own timer is on time,
 * and the startup log says which mode is used. A Redis Cluster is always in timer mode: each node
 * sends its keys' expiry events to its own subscribers only, and following every primary through
 * failovers and reshardings would buy nothing the timer does not give.
 *
 * On every reconnection RedisRegistry.ts asks for the events again (`ensureExpiredEvents`: a Redis
 * restart forgets a `CONFIG SET`), subscribes the key-expiry channel again (`resubscribe`) and
 * writes the session keys back (`restore`: a restart forgets every key). Each command names one key
 * (one session): in a Redis Cluster each runs on the primary of its key's slot
 * (docs/configuration.md#redis-keys).
 */
import { Effect } from "effect"
import {
  COMMAND_TIMEOUT_MS,
  databaseOf,
  isDisconnected,
  isReplyError,
  redisCommand,
  type RedisConnection,
  type RedisSubscriber
} from "../Store/Redis.ts"
import { makeSessionTimers } from "./RegistryBase.ts"

/** `notify-keyspace-events` includes expired-key events ("E" + "x", or "A" which contains "x"). */
export const hasExpiredEvents = (flags: string) => flags.includes("E") && (flags.includes("x") || flags.includes("A"))

/**
 * How long after a session's end this instance's own timer steps in when Redis's expiry event has
 * not closed the connection (the events come from Redis's expiry cycle, ten times a second).
 */
export const SESSION_BACKSTOP_MS = 250

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

export interface RedisSessionsOptions {
  readonly client: RedisConnection
  /** The registry's subscriber connection, on which the key-expiry channel is subscribed. */
  readonly subscriber: RedisSubscriber
  /** REDIS_KEY_PREFIX: a session's key is `<prefix>ws:session:<instance>:<connection id>`. */
  readonly prefix: string
  readonly instance: string
  /** Whether Redis's key-expiry events are used at all (not in a Redis Cluster). */
  readonly expiryEvents: boolean
  /** Runs an effect in the registry's fibers (from a timer or a message callback). */
  readonly run: (effect: Effect.Effect<void>) => unknown
  /** The session is over: its connection closes. */
  readonly onExpired: (connectionId: string) => void
}

export const makeRedisSessions = (options: RedisSessionsOptions) => {
  const { client, expiryEvents, run, subscriber } = options
  const sessionPrefix = `${options.prefix}ws:session:${options.instance}:`
  const sessionKey = (connectionId: string) => `${sessionPrefix}${connectionId}`
  const expiredChannel = `__keyevent@${databaseOf(client)}__:expired`
  /** This instance's sessions: connection id → end (epoch ms), as the last start or extension set it. */
  const sessions = new Map<string, number>()
  /** Whether Redis is believed to send expiry events: the backstop then waits for them a little. */
  let keyEvents = false
  /** Whether the key-expiry channel is subscribed on the current subscriber connection. */
  let expiredSubscribed = false
  let saidExpiredRefused = false

  /** The session is over: the connection closes (once). */
  const expire = (connectionId: string) => {
    if (!sessions.delete(connectionId)) return
    timers.cancel(connectionId)
    options.onExpired(connectionId)
  }
  const putSession = (connectionId: string, endMs: number) =>
    Effect.suspend(() =>
      isDisconnected(client) ? Effect.void : redisCommand(
        "SET (session)",
        () => client.set(sessionKey(connectionId), "1", "PX", Math.max(1, Math.ceil(endMs - Date.now())))
      ).pipe(Effect.asVoid, Effect.ignore) // the backstop timer ends the session anyway
    )
  const arm = (connectionId: string, endMs: number) =>
    timers.start(connectionId, endMs + (keyEvents && expiredSubscribed ? SESSION_BACKSTOP_MS : 0))

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

  /** A message on `expiredChannel`: a key expired; one of this instance's sessions, unless it was extended. */
  const onExpiredKey = (message: string) => {
    if (!message.startsWith(sessionPrefix)) return
    const connectionId = message.slice(sessionPrefix.length)
    const end = sessions.get(connectionId)
    // A key older than this instance's end (an extension whose SET did not reach Redis): put
    // the later end back rather than close a session that is not over.
    if (end !== undefined && end - Date.now() > SESSION_BACKSTOP_MS) run(putSession(connectionId, end))
    else expire(connectionId)
  }

  const subscribeExpired = redisCommand("SUBSCRIBE", () => subscriber.subscribe([expiredChannel]), COMMAND_TIMEOUT_MS * 2, { refusalExpected: true }).pipe(
    Effect.andThen(Effect.sync(() => {
      expiredSubscribed = true
    })),
    Effect.catch((error) => {
      if (!isReplyError(error.cause)) return Effect.logWarning("Redis SUBSCRIBE failed; retried when the connection is back", error.cause)
      // The backstop timers carry every session (without waiting for an event that never comes).
      for (const [id, end] of sessions) arm(id, end)
      if (saidExpiredRefused) return Effect.void
      saidExpiredRefused = true
      return Effect.logInfo(
        `WebSocket session expiry: this instance's timers (Redis refuses SUBSCRIBE to ${expiredChannel}; sessions end on time all the same). ` +
          `Redis said: ${error.cause instanceof Error ? error.cause.message.trim() : String(error.cause)}`
      )
    })
  )
  /**
   * The key-expiry channel marked unsubscribed at once (a new subscriber connection has no
   * subscription), and the SUBSCRIBE that subscribes it again (none in a Redis Cluster).
   */
  const resubscribe = (): Effect.Effect<void> => {
    expiredSubscribed = false
    return expiryEvents ? subscribeExpired : Effect.void
  }

  /** Session keys back into Redis (a restarted Redis has none): its events end them again. */
  const restore = Effect.suspend(() => {
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

  return {
    expiredChannel,
    onExpiredKey,
    resubscribe,
    restore,
    ensureExpiredEvents,
    /** `ConnectionRegistryShape.startSession`. The timer first: whatever becomes of the SET, the session ends. */
    start: (connectionId: string, expiresAtMs: number) =>
      Effect.suspend(() => {
        sessions.set(connectionId, expiresAtMs)
        arm(connectionId, expiresAtMs)
        return putSession(connectionId, expiresAtMs)
      }),
    /** `ConnectionRegistryShape.endSession`. */
    end: (connectionId: string) =>
      Effect.suspend(() => {
        timers.cancel(connectionId)
        if (!sessions.delete(connectionId) || isDisconnected(client)) return Effect.void
        return redisCommand("DEL (session)", () => client.del(sessionKey(connectionId))).pipe(Effect.ignore)
      }),
    /** At shutdown: every timer stopped, every session forgotten (their keys expire in Redis). */
    clear: () => {
      timers.clear()
      sessions.clear()
    }
  }
}
