/**
 * One Redis connection per process (ARCHITECTURE habit 9), present only when `REDIS_URL` is set.
 * Subscribers need their own connection (a subscribed connection runs no other command):
 * `duplicate()` them from here. Every key and channel carries `REDIS_KEY_PREFIX` (CONTRACT §9).
 */
import { Context, Effect, Layer, Redacted, type Scope } from "effect"
import { Redis } from "ioredis"
import { CacheProbe } from "../Observability/Health.ts"

export class RedisClient extends Context.Service<RedisClient, {
  readonly client: Redis
  readonly prefix: string
  /** A new connection with the same options (for SUBSCRIBE); closed with the scope. */
  readonly duplicate: Effect.Effect<Redis, never, Scope.Scope>
}>()("Store/RedisClient") {}

export const makeRedis = (url: string) =>
  new Redis(url, {
    // Fail commands fast while disconnected instead of queueing them forever.
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    connectTimeout: 2000,
    retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
    lazyConnect: false,
    // Commands issued in the same tick (audit XADDs, rate-limit scripts) share one write.
    enableAutoPipelining: true
  })

const closeRedis = (redis: Redis) => Effect.promise(() => redis.quit().catch(() => redis.disconnect()))

export const redisLayer = (url: Redacted.Redacted<string>, prefix: string) =>
  Layer.effect(
    RedisClient,
    Effect.gen(function*() {
      const client = yield* Effect.acquireRelease(Effect.sync(() => makeRedis(Redacted.value(url))), closeRedis)
      client.on("error", () => {}) // reconnects on its own; failures surface on the commands
      return RedisClient.of({
        client,
        prefix,
        duplicate: Effect.acquireRelease(Effect.sync(() => {
          const dup = client.duplicate()
          dup.on("error", () => {})
          return dup
        }), closeRedis)
      })
    })
  )

export class RedisError {
  readonly _tag = "RedisError"
  readonly command: string
  readonly cause: unknown
  constructor(command: string, cause: unknown) {
    this.command = command
    this.cause = cause
  }
}

/**
 * True when the connection was lost and ioredis is between reconnect attempts: a command would
 * wait in the offline queue. Callers with a fallback (rate-limit fail mode, the audit buffer) use
 * it to fail at once. A connection still being established the first time is not "down".
 */
export const isDisconnected = (client: Redis) =>
  client.status === "reconnecting" || client.status === "close" || client.status === "end"

/** What a command that outlived its deadline fails with (the command itself may still complete). */
export class RedisTimeout extends Error {
  readonly ms: number
  constructor(ms: number) {
    super(`Redis did not answer within ${ms} ms`)
    this.ms = ms
  }
}

/**
 * One Redis command (or pipeline) as an Effect, traced as a client span (CONTRACT §8: a span per
 * Redis command). Every module that talks to Redis goes through this. With `timeoutMs`, the
 * command fails with `RedisTimeout` when Redis has not answered by then — a plain timer on the
 * promise, not `Effect.timeout`, which forks two fibers per call: on the hot paths (a rate-limit
 * hit per request and per WebSocket message, and the audit append) those races were about a fifth
 * of a W6 request's CPU.
 */
export const redisCommand = <A>(command: string, run: () => Promise<A>, timeoutMs?: number): Effect.Effect<A, RedisError> =>
  Effect.callback<A, RedisError>((resume) => {
    let settled = false
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => {
      settled = true
      resume(Effect.fail(new RedisError(command, new RedisTimeout(timeoutMs))))
    }, timeoutMs)
    const settle = (result: Effect.Effect<A, RedisError>) => {
      if (settled) return
      settled = true
      if (timer !== undefined) clearTimeout(timer)
      resume(result)
    }
    try {
      run().then((a) => settle(Effect.succeed(a)), (cause: unknown) => settle(Effect.fail(new RedisError(command, cause))))
    } catch (cause) {
      settle(Effect.fail(new RedisError(command, cause)))
    }
    // Interrupted while waiting: the timer goes with the fiber.
    return Effect.sync(() => {
      settled = true
      if (timer !== undefined) clearTimeout(timer)
    })
  }).pipe(
    Effect.withSpan(`redis ${command}`, {
      kind: "client",
      attributes: { "db.system": "redis", "db.operation.name": command }
    }, { captureStackTrace: false })
  )

/**
 * A Lua script as a function of its keys and arguments. ioredis sends EVALSHA and falls back to
 * EVAL once after a script flush (NOSCRIPT), so each call is one round trip.
 */
export const defineScript = <R>(client: Redis, name: string, numberOfKeys: number, lua: string) => {
  if (!(name in client)) client.defineCommand(name, { numberOfKeys, lua })
  const command = (client as unknown as Record<string, (...args: ReadonlyArray<string | number>) => Promise<R>>)[name]!
  return (...args: ReadonlyArray<string | number>): Promise<R> => command.apply(client, [...args])
}

/** The health check of the cache store: PING, when Redis is configured. */
export const RedisProbe = Layer.effect(
  CacheProbe,
  Effect.map(RedisClient, ({ client }) => Effect.asVoid(redisCommand("PING", () => client.ping())))
)
