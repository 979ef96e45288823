/**
 * One Redis connection per process, present only when `REDIS_URL` is set.
 * Subscribers need their own connection (a subscribed connection runs no other command):
 * `duplicate()` them from here. Every key and channel carries `REDIS_KEY_PREFIX` (docs/configuration.md#redis-keys).
 */
import { Context, Data, Effect, Layer, Redacted, type Scope } from "effect"
import { Redis } from "ioredis"
import { withSpanIfTraced } from "../Observability/Spans.ts"

/**
 * A Redis that accepts and never answers (half-open, blackholed) must not hold
 * anything. With commands waiting and no byte back for this long, ioredis destroys the socket,
 * fails what waited and reconnects — and until it is ready again `isDisconnected` makes callers
 * fail at once instead of each waiting for its own deadline. Longer than any command's deadline
 * (COMMAND_TIMEOUT_MS; the audit XADD pipeline's 2 s), so a slow answer fails its command first.
 */
const SOCKET_TIMEOUT_MS = 2000

/** Clients that were ready once: their reconnections count as down (`isDisconnected`). */
const everReady = new WeakSet<Redis>()

export const makeRedis = (url: string) => {
  const client = new Redis(url, {
    // Fail commands fast while disconnected instead of queueing them forever.
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    connectTimeout: 2000,
    socketTimeout: SOCKET_TIMEOUT_MS,
    retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
    lazyConnect: false,
    // Commands issued in the same tick (audit XADDs, rate-limit scripts) share one write.
    enableAutoPipelining: true
  })
  return trackReady(client)
}

const trackReady = (client: Redis) => {
  client.once("ready", () => everReady.add(client))
  return client
}

/** How long `QUIT` may take at shutdown before the connection is simply dropped. */
const QUIT_TIMEOUT_MS = 300

/** QUIT (Redis closes the connection after what was sent), or a plain disconnect when Redis does not answer in time. */
const closeRedis = (redis: Redis) =>
  Effect.callback<void>((resume) => {
    const timer = setTimeout(() => {
      redis.disconnect()
      resume(Effect.void)
    }, QUIT_TIMEOUT_MS)
    redis.quit().catch(() => redis.disconnect()).finally(() => {
      clearTimeout(timer)
      resume(Effect.void)
    })
  })

export class RedisClient extends Context.Service<RedisClient, {
  readonly client: Redis
  readonly prefix: string
  /** A new connection with the same options (for SUBSCRIBE); closed with the scope. */
  readonly duplicate: Effect.Effect<Redis, never, Scope.Scope>
}>()("Store/RedisClient") {
  /** One connection to `url`; every key and channel carries `prefix` (REDIS_KEY_PREFIX). */
  static readonly layer = (url: Redacted.Redacted<string>, prefix: string) =>
    Layer.effect(
      RedisClient,
      Effect.gen(function*() {
        const client = yield* Effect.acquireRelease(Effect.sync(() => makeRedis(Redacted.value(url))), closeRedis)
        client.on("error", () => {}) // reconnects on its own; failures surface on the commands
        return RedisClient.of({
          client,
          prefix,
          duplicate: Effect.acquireRelease(Effect.sync(() => {
            // A subscriber: its owner subscribes again on every "ready" (Ws/RedisRegistry.ts
            // `recover`); ioredis's own resubscribe would be a second SUBSCRIBE whose promise
            // nobody holds, an unhandled rejection when the connection drops again meanwhile.
            const dup = trackReady(client.duplicate({ autoResubscribe: false }))
            dup.on("error", () => {})
            return dup
          }), closeRedis)
        })
      })
    )
}

/** A Redis command failed (`cause`: the client's error, or a `RedisTimeout`). */
export class RedisError extends Data.TaggedError("RedisError")<{ readonly command: string; readonly cause: unknown }> {}

/**
 * True when the connection was lost and is not ready again: ioredis is between reconnect
 * attempts, or reconnecting to a server that has not answered its handshake yet (a blackholed
 * Redis: the socket connects, nothing answers). A command would wait in the offline queue.
 * Callers with a fallback (rate-limit fail mode, the audit buffer) use it to fail at once. A
 * connection still being established the first time is not "down".
 */
export const isDisconnected = (client: Redis) =>
  client.status === "reconnecting" || client.status === "close" || client.status === "end" ||
  ((client.status === "connecting" || client.status === "connect") && everReady.has(client))

/** What a command that outlived its deadline fails with (the command itself may still complete). */
export class RedisTimeout extends Data.TaggedError("RedisTimeout")<{ readonly ms: number; readonly message: string }> {
  static readonly of = (ms: number) => new RedisTimeout({ ms, message: `Redis did not answer within ${ms} ms` })
}

/** The deadline of a command whose caller names none (every command has one). */
export const COMMAND_TIMEOUT_MS = 1000

/**
 * One Redis command (or pipeline) as an Effect, traced as a client span when tracing is on (a
 * span per Redis command: docs/operations.md#tracing; none at all when it is off,
 * Observability/Spans.ts). Every module that talks to Redis goes through this. The command fails
 * with `RedisTimeout` when Redis has not answered within `timeoutMs` (COMMAND_TIMEOUT_MS unless
 * given) — a plain timer on the promise, not `Effect.timeout`, which forks two fibers per call: on
 * the hot paths (a rate-limit hit per request and per WebSocket message, and the audit append)
 * those races would be a large share of a short request's CPU.
 */
export const redisCommand = <A>(
  command: string,
  run: () => Promise<A>,
  timeoutMs: number = COMMAND_TIMEOUT_MS
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
  }).pipe((effect) =>
    withSpanIfTraced(effect, `redis ${command}`, () => ({
      kind: "client",
      attributes: { "db.system": "redis", "db.operation.name": command }
    }))
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

/**
 * Lua: the function `next_generation(value)`, the value a generation takes after `value` (its
 * current one, or false when missing): the larger of `value + 1` and Redis's clock in µs. So a value
 * is never issued twice, even after Redis lost a key or went back to older values (a restart from
 * a snapshot, a failover to a replica that lagged, a hand edit): the clock has moved past every
 * value issued before, as long as Redis's clock (the new primary's, after a failover) is not behind
 * the clock of any earlier bump, and no key is bumped more than once a microsecond on average (a
 * key bumped faster runs ahead of the clock, and a rollback could meet its values again). Values
 * stay below 2^53 (exact in Lua's numbers) until the year 2255. The read cache's generations
 * (Authors/ReadCache.ts `BUMP_LUA`).
 */
export const nextGenerationLua = `local clock_now = redis.call('TIME')
clock_now = tonumber(clock_now[1]) * 1000000 + tonumber(clock_now[2])
local function next_generation(value)
  local n = tonumber(value or '0') + 1
  if n < clock_now then n = clock_now end
  return string.format('%.0f', n)
end
`

/**
 * Lua: `local <name> = GET <key>`, and when the key is missing it is first set to Redis's clock in
 * µs, as `next_generation` would: a reader of a lost key never sees a value issued before.
 */
export const clockCounterLua = (name: string, key: string) => `local ${name} = redis.call('GET', ${key})
if not ${name} then
  local clock = redis.call('TIME')
  ${name} = clock[1] .. string.format('%06d', tonumber(clock[2]))
  redis.call('SET', ${key}, ${name})
end
`

/**
 * Lua: `local <name>` = the *generations record* at hash `<key>`, read as one value
 * `rows.count.high`: `rows` and `count` are generations like `clockCounterLua`'s (a missing one is
 * first set to Redis's clock in µs), `high` a mark that only its writer sets (missing: 0). One hash,
 * so a flush or an eviction loses all three together. The read cache keeps the list's generations
 * this way (Authors/ReadCache.ts).
 */
export const clockRecordLua = (name: string, key: string) => `local ${name}_r = redis.call('HMGET', ${key}, 'rows', 'count', 'high')
if not ${name}_r[1] or not ${name}_r[2] then
  local clock = redis.call('TIME')
  local start = clock[1] .. string.format('%06d', tonumber(clock[2]))
  if not ${name}_r[1] then ${name}_r[1] = start; redis.call('HSET', ${key}, 'rows', start) end
  if not ${name}_r[2] then ${name}_r[2] = start; redis.call('HSET', ${key}, 'count', start) end
end
local ${name} = ${name}_r[1] .. '.' .. ${name}_r[2] .. '.' .. (${name}_r[3] or '0')
`
