/**
 * The Redis implementation of `RateLimiter` (docs/errors-and-limits.md#http-rate-limit): one Lua script per hit, so the check
 * and the admission are one atomic step and one round trip — exact under concurrency and across
 * instances. `now` is Redis's clock (TIME, read inside the script): one clock for every instance,
 * however far their own clocks drift apart. When the fiber's Clock is not the live
 * one (a TestClock: the contract suite), that clock drives the script instead, as it drives the
 * in-process implementation. Each key is a ZSET of admitted hits only, so its size is bounded by
 * `limit` and it expires with the window. `reserve` is the same script; its release removes that
 * hit's member (ZREM).
 */
import { Clock, Context, Effect } from "effect"
import { randomBytes } from "node:crypto"
import type { GenerationKey } from "../Domain/RequestContext.ts"
import { defineScript, isDisconnected, RedisClient, redisCommand } from "../Store/Redis.ts"
import { clockCounterLua, clockRecordLua } from "../Store/RedisLua.ts"
import { decision, RateLimiterUnavailable, type RateLimiterShape } from "./Decision.ts"
import { sharedReads } from "./GenerationReads.ts"

/** The script up to its reply: `allowed`, `count`, `oldestScore` and `now` set. */
const SLIDING_WINDOW_BODY = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
local allowed = 0
if count < limit then
  redis.call('ZADD', key, now, ARGV[4])
  count = count + 1
  allowed = 1
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local oldestScore = -1
if oldest[2] then oldestScore = tonumber(oldest[2]) end
if count > 0 then redis.call('PEXPIRE', key, window) end
`

/**
 * KEYS[1] = window key; ARGV = now (ms, or "" for Redis's TIME), window (ms), limit, member.
 * Returns {allowed, count, oldest|-1, now}. (TIME in a script that writes needs effects
 * replication: the only mode since Redis 7, the default since 5.)
 */
export const SLIDING_WINDOW_LUA = `${SLIDING_WINDOW_BODY}return {allowed, count, oldestScore, now}
`

/**
 * The same hit, and the value of one more key, KEYS[2], in the same round trip (a missing key
 * starts at Redis's clock in µs: `clockCounterLua`). The read cache's generations ride here: the
 * rate check every request makes anyway reads them (Authors/ReadCache.ts). Returns {allowed,
 * count, oldest|-1, now, value}.
 */
export const SLIDING_WINDOW_READ_LUA = `${SLIDING_WINDOW_BODY}${clockCounterLua("value", "KEYS[2]")}return {allowed, count, oldestScore, now, value}
`

/** The same, KEYS[2] a generations record (a hash, read as one value: `clockRecordLua`). */
export const SLIDING_WINDOW_READ_RECORD_LUA = `${SLIDING_WINDOW_BODY}${clockRecordLua("value", "KEYS[2]")}return {allowed, count, oldestScore, now, value}
`

/** KEYS[1] = a generation (or a generations record): its value alone (a Redis Cluster's read, beside the hit). */
const GENERATION_LUA = `${clockCounterLua("value", "KEYS[1]")}return value
`
const GENERATION_RECORD_LUA = `${clockRecordLua("value", "KEYS[1]")}return value
`

/** Effect's own clock (`Clock.Clock`'s default): in its presence Redis's TIME is the clock. */
const liveClock = Context.get(Context.empty(), Clock.Clock)

export const makeRedisRateLimiter = Effect.gen(function*() {
  const { client, mode, prefix } = yield* RedisClient
  type Reply = readonly [number, number, number, number, string?]
  const slidingWindow = defineScript<Reply>(client, "adsSlidingWindow", 1, SLIDING_WINDOW_LUA)
  const slidingWindowRead = defineScript<Reply>(client, "adsSlidingWindowRead", 2, SLIDING_WINDOW_READ_LUA)
  const slidingWindowReadRecord = defineScript<Reply>(client, "adsSlidingWindowReadRecord", 2, SLIDING_WINDOW_READ_RECORD_LUA)
  const generation = defineScript<string>(client, "adsGeneration", 1, GENERATION_LUA)
  const generationRecord = defineScript<string>(client, "adsGenerationRecord", 1, GENERATION_RECORD_LUA)
  const readGeneration = sharedReads((key, record) => (record ? generationRecord : generation)(key))
  /**
   * The hit and the generation `read`. One script on one server or a Sentinel group's primary; in a
   * Redis Cluster the window's key and the generation's hash to different slots, so the generation
   * is read beside the hit, by a command the concurrent reads of one scope share (GenerationReads.ts;
   * no round trip more — docs/performance.md#redis-cluster).
   */
  const hitAndRead = (windowKey: string, read: GenerationKey | undefined, ...args: ReadonlyArray<string | number>): Promise<Reply> => {
    if (read === undefined) return slidingWindow(windowKey, ...args)
    const key = `${prefix}${read.key}`
    if (mode !== "cluster") return (read.record ? slidingWindowReadRecord : slidingWindowRead)(windowKey, key, ...args)
    return Promise.all([slidingWindow(windowKey, ...args), readGeneration(key, read.record)]).then(
      ([[allowed, count, oldest, at], value]) => [allowed, count, oldest, at, value] as const
    )
  }
  // ZSET members must be unique per hit: two hits in the same millisecond are two admissions.
  const instance = randomBytes(6).toString("hex")
  let sequence = 0
  const admit = (key: string, limit: number, windowMs: number, read?: GenerationKey) =>
    Effect.clockWith((clock) => {
      const member = `${instance}:${(sequence = (sequence + 1) % Number.MAX_SAFE_INTEGER)}`
      // Not connected: fail now (RATE_LIMIT_FAIL_MODE) rather than queue behind reconnects.
      if (isDisconnected(client)) return Effect.fail(new RateLimiterUnavailable({ cause: new Error(`Redis ${client.status}`) }))
      const now = clock === liveClock ? "" : clock.currentTimeMillisUnsafe()
      const windowKey = `${prefix}ratelimit:${key}`
      return redisCommand("EVALSHA sliding_window", () => hitAndRead(windowKey, read, now, windowMs, limit, member)).pipe(
        Effect.mapError((error) => new RateLimiterUnavailable({ cause: error.cause })),
        Effect.map(([allowed, count, oldest, at, value]) => ({
          member,
          decision: decision(allowed === 1, limit, count, oldest < 0 ? undefined : oldest, at, windowMs, value)
        }))
      )
    })
  /** Removes one admitted hit (its member is unique): the window is as if it had never been admitted. */
  const takeBack = (key: string, member: string) =>
    Effect.suspend(() =>
      isDisconnected(client)
        ? Effect.fail(new RateLimiterUnavailable({ cause: new Error(`Redis ${client.status}`) }))
        : redisCommand("ZREM", () => client.zrem(`${prefix}ratelimit:${key}`, member)).pipe(
          Effect.mapError((error) => new RateLimiterUnavailable({ cause: error.cause })),
          Effect.asVoid
        )
    )
  const limiter: RateLimiterShape = {
    hit: (key, limit, windowMs, read) => Effect.map(admit(key, limit, windowMs, read), (admitted) => admitted.decision),
    reserve: (key, limit, windowMs) =>
      Effect.map(admit(key, limit, windowMs), ({ decision: d, member }) => ({
        decision: d,
        release: d.allowed ? takeBack(key, member) : Effect.void
      }))
  }
  return limiter
})
