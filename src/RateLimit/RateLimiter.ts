/**
 * Sliding-window rate limiting (docs/errors-and-limits.md#http-rate-limit): a hit is admitted while fewer than `limit` hits
 * were admitted for the key in the trailing window. Two implementations share this interface
 * and one contract test suite: in-process (here) and Redis (one Lua script per hit).
 */
import { Clock, Context, Effect, Layer, Option } from "effect"
import { rateLimitKeys, rateLimitKeysEvictedTotal, rateLimitStoreErrorsTotal } from "../Observability/Metrics.ts"
import { Outages } from "../Observability/Outages.ts"
import { decision, type RateDecision, RateLimiterUnavailable, type RateLimiterShape } from "./Decision.ts"
import { makeRedisRateLimiter } from "./RedisRateLimiter.ts"


/** The trailing window of the per-minute limits: HTTP requests, WebSocket upgrades and messages. */
export const RATE_WINDOW_MS = 60_000

/**
 * The headers of a limited response (docs/errors-and-limits.md#http-rate-limit): X-RateLimit-Limit/Remaining/Reset, and
 * Retry-After when the hit was refused.
 */
export const rateLimitHeaders = (d: RateDecision): Record<string, string> => ({
  ...(d.allowed ? {} : { "Retry-After": String(d.retryAfterSeconds) }),
  "X-RateLimit-Limit": String(d.limit),
  "X-RateLimit-Remaining": String(d.remaining),
  "X-RateLimit-Reset": String(d.resetSeconds)
})

export type FailMode = "open" | "closed"

/**
 * A store failure (docs/errors-and-limits.md#http-rate-limit), the one rule for HTTP and WebSocket limits: the failure is
 * counted (`rate_limit_store_errors_total`) and reported as an outage of Redis — logged when the
 * outage begins, not per request (docs/operations.md#outages); `open` admits without a decision
 * (none), `closed` refuses as if the window were full.
 */
export const withFailMode = (mode: FailMode, limitType: string, limit: number) =>
  (hit: Effect.Effect<RateDecision, RateLimiterUnavailable>): Effect.Effect<Option.Option<RateDecision>> =>
    hit.pipe(
      Effect.map(Option.some),
      Effect.catch((error) =>
        Effect.flatMap(Effect.service(Outages), (outages) => outages.failed("redis", error.cause, "rate limit check", `failing ${mode}`)).pipe(
          Effect.andThen(Effect.sync(() => rateLimitStoreErrorsTotal.inc({ limit_type: limitType }))),
          Effect.as(
            mode === "open"
              ? Option.none<RateDecision>()
              : Option.some<RateDecision>({ allowed: false, limit, remaining: 0, resetSeconds: RATE_WINDOW_MS / 1000, retryAfterSeconds: RATE_WINDOW_MS / 1000 })
          )
        )
      )
    )

/** Keys the in-process limiter holds at most (each at most `limit` timestamps, ~1 KiB at 100). */
export const MEMORY_MAX_KEYS = 100_000

export interface MemoryRateLimiterOptions {
  /** Keys held at most (default `MEMORY_MAX_KEYS`). */
  readonly maxKeys?: number
}

/**
 * In-process sliding window log; memory per key is bounded by `limit` timestamps, and the number
 * of keys by `maxKeys`: a new key in a full store evicts the least recently used one (counted in
 * `rate_limit_keys_evicted_total` when it still had hits in its window — that client's budget
 * starts again; `rate_limit_keys` shows how full the store is). Each key keeps its own window, so
 * keys of different windows (60 s requests, 15 min failed logins) share the store and each is
 * swept only once its own window has passed.
 */
export const memoryRateLimiter = (options: MemoryRateLimiterOptions = {}) => Effect.gen(function*() {
  const maxKeys = Math.max(1, options.maxKeys ?? MEMORY_MAX_KEYS)
  /** By recency of use: the first key is the least recently used. */
  const windows = new Map<string, { hits: Array<number>; windowMs: number }>()
  let lastSweep = 0
  const SWEEP_EVERY_MS = 60_000
  const live = (entry: { hits: Array<number>; windowMs: number }, now: number) =>
    entry.hits.length > 0 && entry.hits[entry.hits.length - 1]! > now - entry.windowMs
  const sweep = (now: number) => {
    if (now - lastSweep < SWEEP_EVERY_MS) return
    lastSweep = now
    for (const [key, entry] of windows) {
      if (!live(entry, now)) windows.delete(key)
    }
  }
  const evictLeastRecent = (now: number) => {
    const oldest = windows.entries().next()
    if (oldest.done === true) return
    windows.delete(oldest.value[0])
    if (live(oldest.value[1], now)) rateLimitKeysEvictedTotal.inc()
  }
  const admit = (key: string, limit: number, windowMs: number, now: number) => {
    sweep(now)
    let entry = windows.get(key)
    if (entry === undefined) {
      while (windows.size >= maxKeys) evictLeastRecent(now)
      entry = { hits: [], windowMs }
    } else {
      windows.delete(key) // re-inserted below: most recently used last
    }
    windows.set(key, entry)
    rateLimitKeys.set(windows.size)
    entry.windowMs = windowMs
    const hits = entry.hits
    let expired = 0
    while (expired < hits.length && hits[expired]! <= now - windowMs) expired++
    if (expired > 0) hits.splice(0, expired)
    if (hits.length < limit) {
      hits.push(now)
      return decision(true, limit, hits.length, hits[0], now, windowMs)
    }
    return decision(false, limit, hits.length, hits[0], now, windowMs)
  }
  /** Hits of the same millisecond are interchangeable: taking back one of them is exact. */
  const takeBack = (key: string, at: number) => {
    const hits = windows.get(key)?.hits
    const index = hits?.lastIndexOf(at) ?? -1
    if (index >= 0) hits!.splice(index, 1)
  }
  return RateLimiter.of({
    hit: (key, limit, windowMs) => Effect.map(Clock.currentTimeMillis, (now) => admit(key, limit, windowMs, now)),
    reserve: (key, limit, windowMs) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const d = admit(key, limit, windowMs, now)
        let released = !d.allowed
        const release = Effect.sync(() => {
          if (released) return
          released = true
          takeBack(key, now)
        })
        return { decision: d, release }
      })
  })
})

export class RateLimiter extends Context.Service<RateLimiter, RateLimiterShape>()("RateLimit/RateLimiter") {
  /** This process's windows: one instance's budget. */
  static readonly layerMemory = Layer.effect(RateLimiter, memoryRateLimiter())
  /** Windows in Redis, shared by every instance (needs `RedisClient`). */
  static readonly layerRedis = Layer.effect(RateLimiter, makeRedisRateLimiter)
}
