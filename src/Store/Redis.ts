/**
 * The service's connection to Redis, present only when Redis is configured: one server
 * (`REDIS_URL`), a Redis Cluster (`REDIS_CLUSTER_NODES`) or the primary of a Sentinel group
 * (`REDIS_SENTINELS`), each through ioredis's own support for it — ioredis follows a Sentinel
 * failover to the promoted primary and a cluster's slots to whichever node holds them
 * (docs/configuration.md#redis-cluster-and-sentinel). What every feature needs is here, the same in
 * every mode: commands and scripts (`defineScript`, EVALSHA) with a deadline each
 * (`redisCommand`), auto-pipelining, readiness (`isDisconnected`), a subscriber connection and
 * publishing (sharded pub/sub in a cluster), a health check that reaches every primary, and the
 * key prefix. In a cluster every script and multi-key command must name keys of one slot
 * (docs/configuration.md#redis-keys). Every key and channel carries `REDIS_KEY_PREFIX`.
 * What reaches each node of a cluster is RedisNodes.ts; the generations' Lua, RedisLua.ts. The
 * connection's options, its lifecycle and the command wrapper stay together here (about 350
 * lines): each is read with the others (a deadline, a reconnection and `isDisconnected` are one
 * story).
 */
import { Context, Data, Effect, Layer, Redacted, type Scope } from "effect"
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis"
import { type RedisTarget, singleRedis } from "../Config/Redis.ts"
import { Outages } from "../Observability/Outages.ts"
import { withSpanIfTraced } from "../Observability/Spans.ts"
import { pingAll, writeAll } from "./RedisNodes.ts"

/** One server or a Sentinel group's primary (a `Redis`), or a Redis Cluster. */
export type RedisConnection = Redis | Cluster

/** Which kind of Redis the connection reaches. */
export type RedisMode = "single" | "sentinel" | "cluster"

/**
 * A Redis that accepts and never answers (half-open, blackholed) must not hold
 * anything. With commands waiting and no byte back for this long, ioredis destroys the socket,
 * fails what waited and reconnects — and until it is ready again `isDisconnected` makes callers
 * fail at once instead of each waiting for its own deadline. Longer than any command's deadline
 * (COMMAND_TIMEOUT_MS; the audit XADD pipeline's 2 s), so a slow answer fails its command first.
 */
const SOCKET_TIMEOUT_MS = 2000

/** Clients that were ready once: their reconnections count as down (`isDisconnected`). */
const everReady = new WeakSet<RedisConnection>()

/** Connections the service closes (closeRedis): their end is final. */
const closing = new WeakSet<RedisConnection>()

/** Reconnection backoff: 100 ms more per attempt, at most 2 s. */
const backoff = (attempt: number) => Math.min(attempt * 100, 2000)

/** Every connection to a Redis node, in every mode: deadlines, credentials, TLS. */
const nodeOptions = (target: RedisTarget): RedisOptions => ({
  connectTimeout: 2000,
  socketTimeout: SOCKET_TIMEOUT_MS,
  ...(target.username._tag === "Some" ? { username: target.username.value } : {}),
  ...(target.password._tag === "Some" ? { password: Redacted.value(target.password.value) } : {}),
  ...(target.tls ? { tls: {} } : {})
})

/** A connection of its own (one server, a Sentinel group's primary): fail fast while disconnected. */
const ownOptions = (target: RedisTarget): RedisOptions => ({
  ...nodeOptions(target),
  // Fail commands fast while disconnected instead of queueing them forever.
  maxRetriesPerRequest: 1,
  enableOfflineQueue: true,
  retryStrategy: backoff,
  lazyConnect: false,
  // Commands issued in the same tick (audit XADDs, rate-limit scripts) share one write.
  enableAutoPipelining: true
})

/**
 * A Redis Cluster. A command for a primary that went down is retried by ioredis (every
 * `retryDelayOnFailover` while its replica takes over), behind the caller's deadline; the slot map
 * is refreshed every 5 s besides the refreshes MOVED replies and lost nodes trigger. With TLS the
 * nodes are reached by the names the cluster announces, so their certificates match (ioredis's note
 * on ElastiCache).
 */
const clusterOptions = (target: RedisTarget): ClusterOptions => ({
  redisOptions: { ...nodeOptions(target), maxRetriesPerRequest: 1 },
  enableOfflineQueue: true,
  enableReadyCheck: true,
  enableAutoPipelining: true,
  clusterRetryStrategy: backoff,
  slotsRefreshInterval: 5000,
  lazyConnect: false,
  ...(target.tls ? { dnsLookup: (address: string, callback: (error: null, address: string) => void) => callback(null, address) } : {})
})

/** A new connection to `target` (a URL: one server). Errors surface on its commands; give it an "error" listener. */
export const makeRedis = (target: RedisTarget | string): RedisConnection => {
  const resolved = typeof target === "string" ? singleRedis(target) : target
  const topology = resolved.topology
  switch (topology._tag) {
    case "Single":
      // The URL's own credentials and `rediss://` win over REDIS_USERNAME / REDIS_PASSWORD.
      return trackReady(new Redis(Redacted.value(topology.url), ownOptions(resolved)))
    case "Sentinel":
      return trackReady(new Redis({
        ...ownOptions(resolved),
        sentinels: topology.sentinels.map(({ host, port }) => ({ host, port })),
        name: topology.master,
        ...(topology.sentinelUsername._tag === "Some" ? { sentinelUsername: topology.sentinelUsername.value } : {}),
        ...(topology.sentinelPassword._tag === "Some" ? { sentinelPassword: Redacted.value(topology.sentinelPassword.value) } : {}),
        ...(resolved.tls ? { enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
        sentinelRetryStrategy: backoff,
        // A Sentinel that accepts and never answers must not hold the reconnection: the next one is asked.
        sentinelCommandTimeout: 1000,
        // Sentinels announce a failover (+switch-master): the connection moves at once, also when
        // the old primary is still reachable (it would answer READONLY once demoted).
        failoverDetector: true
      }))
    case "Cluster":
      return trackReady(new Cluster(topology.nodes.map(({ host, port }) => ({ host, port })), clusterOptions(resolved)))
  }
}

const trackReady = <C extends RedisConnection>(client: C): C => {
  client.once("ready", () => everReady.add(client))
  if (client instanceof Redis && client.options.sentinels !== undefined && client.options.sentinels !== null) connectAgainAfterAbort(client)
  return client
}

/**
 * ioredis ends a Sentinel connection for good when the Sentinels announce a failover
 * (+switch-master) while it is asking them for the primary — a Sentinel that does not answer
 * (frozen with its host) holds it there for `sentinelCommandTimeout`: its failover detector closes
 * the connector under the connect in progress, the connect fails ("Connection is closed.") and the
 * client ends instead of retrying. An end straight from connecting (not after a close), which the
 * service did not ask for, is followed by a new connect, after the usual backoff
 * (docs/operations.md#redis-failover).
 */
const connectAgainAfterAbort = (client: Redis) => {
  let last = client.status
  for (const status of ["connecting", "connect", "close"] as const) client.on(status, () => (last = status))
  client.on("end", () => {
    if (last !== "connecting" || closing.has(client)) return
    setTimeout(() => void client.connect().catch(() => {}), backoff(1))
  })
}

/** The database number a connection uses (a cluster has only 0). */
export const databaseOf = (client: RedisConnection): number => (client instanceof Cluster ? 0 : client.options.db ?? 0)

/** The mode a connection was made for. */
export const modeOf = (client: RedisConnection): RedisMode =>
  client instanceof Cluster ? "cluster" : client.options.sentinels !== undefined && client.options.sentinels !== null ? "sentinel" : "single"

/** How long `QUIT` may take at shutdown before the connection is simply dropped. */
const QUIT_TIMEOUT_MS = 300

/** QUIT (Redis closes the connection after what was sent), or a plain disconnect when Redis does not answer in time. */
const closeRedis = (redis: RedisConnection) =>
  Effect.callback<void>((resume) => {
    closing.add(redis)
    const timer = setTimeout(() => {
      redis.disconnect()
      resume(Effect.void)
    }, QUIT_TIMEOUT_MS)
    redis.quit().catch(() => redis.disconnect()).finally(() => {
      clearTimeout(timer)
      resume(Effect.void)
    })
  })

/**
 * A connection that only subscribes (a subscribed connection runs no other command). On one
 * server or a Sentinel group's primary: SUBSCRIBE, and its owner subscribes again on every "ready"
 * (ioredis's own resubscribe is off: it would be a second SUBSCRIBE whose promise nobody holds, an
 * unhandled rejection when the connection drops again meanwhile). In a cluster: sharded pub/sub
 * (SSUBSCRIBE, Redis 7), one connection per primary holding a subscribed channel's slot, which
 * ioredis moves and subscribes again itself after a failover or a resharding — so subscribing a
 * channel again is a no-op there.
 */
export interface RedisSubscriber {
  /** Its status and its "ready" events. */
  readonly connection: RedisConnection
  readonly subscribe: (channels: ReadonlyArray<string>) => Promise<void>
  /** Each message on a subscribed channel. */
  readonly onMessage: (listener: (channel: string, message: string) => void) => void
}

const makeSubscriber = (client: RedisConnection): RedisSubscriber => {
  if (client instanceof Cluster) {
    const connection = trackReady(client.duplicate([], { shardedSubscribers: true }))
    const subscribed = new Set<string>()
    return {
      connection,
      // One channel per SSUBSCRIBE: each may hash to another slot.
      subscribe: (channels) =>
        Promise.all(channels.filter((channel) => !subscribed.has(channel)).map(async (channel) => {
          subscribed.add(channel) // ioredis keeps it from here on, even when this first attempt fails
          await connection.ssubscribe(channel)
        })).then(() => undefined),
      onMessage: (listener) => connection.on("smessage", listener)
    }
  }
  const connection = trackReady(client.duplicate({ autoResubscribe: false }))
  return {
    connection,
    subscribe: (channels) => connection.subscribe(...channels).then(() => undefined),
    onMessage: (listener) => connection.on("message", listener)
  }
}

export interface RedisClientShape {
  readonly client: RedisConnection
  readonly mode: RedisMode
  readonly prefix: string
  /** A subscriber connection (sharded in a cluster); closed with the scope. */
  readonly subscriber: Effect.Effect<RedisSubscriber, never, Scope.Scope>
  /** PUBLISH; SPUBLISH in a cluster (the channel's message goes to its slot's primary only). */
  readonly publish: (channel: string, message: string) => Promise<unknown>
  /** Succeeds when Redis answers — in a cluster, every slot's primary. */
  readonly ping: Effect.Effect<void, RedisError>
  /** Succeeds when Redis takes a write of `key` (in a cluster, on every primary): /health's check. */
  readonly writeCheck: (key: string, ttlMs: number) => Effect.Effect<void, RedisError>
}

export class RedisClient extends Context.Service<RedisClient, RedisClientShape>()("Store/RedisClient") {
  /** The service over a connection made elsewhere (`makeRedis`); its owner closes it. */
  static readonly make = (client: RedisConnection, prefix: string): RedisClientShape => {
    const mode = modeOf(client)
    return {
      client,
      mode,
      prefix,
      subscriber: Effect.acquireRelease(
        Effect.sync(() => {
          const subscriber = makeSubscriber(client)
          subscriber.connection.on("error", () => {})
          return subscriber
        }),
        (subscriber) => closeRedis(subscriber.connection)
      ),
      publish: mode === "cluster" ? (channel, message) => client.spublish(channel, message) : (channel, message) => client.publish(channel, message),
      ping: redisCommand("PING", () => pingAll(client), undefined, { check: true }),
      writeCheck: (key, ttlMs) => redisCommand("SET (health)", () => writeAll(client, key, ttlMs), undefined, { check: true })
    }
  }

  /** A connection to `target` (a URL: one server); every key and channel carries `prefix` (REDIS_KEY_PREFIX). */
  static readonly layer = (target: RedisTarget | Redacted.Redacted<string>, prefix: string) =>
    Layer.effect(
      RedisClient,
      Effect.gen(function*() {
        const client = yield* Effect.acquireRelease(
          Effect.sync(() => makeRedis(Redacted.isRedacted(target) ? singleRedis(target) : target)),
          closeRedis
        )
        client.on("error", () => {}) // reconnects on its own; failures surface on the commands
        return RedisClient.of(RedisClient.make(client, prefix))
      })
    )
}

/** A Redis command failed (`cause`: the client's error — Redis's own reply — or a `RedisTimeout`). */
export class RedisError extends Data.TaggedError("RedisError")<{ readonly command: string; readonly cause: unknown }> {
  /** Names the command; the reply follows in `cause` (a log line shows both: Observability/Logging.ts `errorText`). */
  override get message() {
    return `Redis ${this.command} failed`
  }
}

/**
 * True when the connection was lost and is not ready again: ioredis is between reconnect
 * attempts, or reconnecting to a server that has not answered its handshake yet (a blackholed
 * Redis: the socket connects, nothing answers). A command would wait in the offline queue.
 * Callers with a fallback (rate-limit fail mode, the audit buffer) use it to fail at once. A
 * connection still being established the first time is not "down".
 */
export const isDisconnected = (client: RedisConnection) =>
  client.status === "reconnecting" || client.status === "close" || client.status === "end" ||
  ((client.status === "connecting" || client.status === "connect") && everReady.has(client))

/** What a command that outlived its deadline fails with (the command itself may still complete). */
export class RedisTimeout extends Data.TaggedError("RedisTimeout")<{ readonly ms: number; readonly message: string }> {
  static readonly of = (ms: number) => new RedisTimeout({ ms, message: `Redis did not answer within ${ms} ms` })
}

/** The deadline of a command whose caller names none (every command has one). */
export const COMMAND_TIMEOUT_MS = 1000

/** Redis answered the command with an error (unknown or renamed command, NOPERM, READONLY, OOM), as opposed to not answering. */
export const isReplyError = (cause: unknown) => cause instanceof Error && cause.name === "ReplyError"

export interface CommandOptions {
  /**
   * A refusal is an answer the caller expects and handles (CONFIG on a managed Redis): it is not
   * reported as an outage of Redis. A command Redis does not answer still is.
   */
  readonly refusalExpected?: boolean
  /** A health check's own command: what it finds is /health's to report, not an operation that failed. */
  readonly check?: boolean
}

/**
 * One Redis command (or pipeline) as an Effect, traced as a client span when tracing is on (a
 * span per Redis command: docs/operations.md#tracing; none at all when it is off,
 * Observability/Spans.ts). Every module that talks to Redis goes through this. The command fails
 * with `RedisTimeout` when Redis has not answered within `timeoutMs` (COMMAND_TIMEOUT_MS unless
 * given) — a plain timer on the promise, not `Effect.timeout`, which forks two fibers per call: on
 * the hot paths (a rate-limit hit per request and per WebSocket message, and the audit append)
 * those races would be a large share of a short request's CPU. A failure is reported to the
 * outage tracker (docs/operations.md#outages): the first of an outage logs it, the rest count.
 */
export const redisCommand = <A>(
  command: string,
  run: () => Promise<A>,
  timeoutMs: number = COMMAND_TIMEOUT_MS,
  options?: CommandOptions
): Effect.Effect<A, RedisError> =>
  Effect.callback<A, RedisError>((resume) => {
    let settled = false
    const timer = setTimeout(() => {
      settled = true
      resume(Effect.fail(new RedisError({ command, cause: RedisTimeout.of(timeoutMs) })))
    }, timeoutMs)
    const settle = (result: Effect.Effect<A, RedisError>) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resume(result)
    }
    try {
      run().then((a) => settle(Effect.succeed(a)), (cause: unknown) => settle(Effect.fail(new RedisError({ command, cause }))))
    } catch (cause) {
      settle(Effect.fail(new RedisError({ command, cause })))
    }
    // Interrupted while waiting: the timer goes with the fiber.
    return Effect.sync(() => {
      settled = true
      clearTimeout(timer)
    })
  }).pipe(
    Effect.tapError((error) =>
      options?.check === true || (options?.refusalExpected === true && isReplyError(error.cause))
        ? Effect.void
        : Effect.flatMap(Effect.service(Outages), (outages) => outages.failed("redis", error.cause, command))
    ),
    (effect) =>
    withSpanIfTraced(effect, `redis ${command}`, () => ({
      kind: "client",
      attributes: { "db.system": "redis", "db.operation.name": command }
    }))
  )

/**
 * A Lua script as a function of its keys and arguments (`numberOfKeys` null: the first argument
 * says how many keys follow). ioredis sends EVALSHA and falls back to EVAL once after a script
 * flush (NOSCRIPT), so each call is one round trip.
 */
export const defineScript = <R>(client: RedisConnection, name: string, numberOfKeys: number | null, lua: string) => {
  if (!(name in client)) client.defineCommand(name, numberOfKeys === null ? { lua } : { numberOfKeys, lua })
  const command = (client as unknown as Record<string, (...args: ReadonlyArray<string | number>) => Promise<R>>)[name]!
  return (...args: ReadonlyArray<string | number>): Promise<R> => command.apply(client, [...args])
}
