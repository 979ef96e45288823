/**
 * What a rate limiter decides, and the interface both implementations (in-process, Redis) share:
 * apart from RateLimiter.ts so the Redis implementation needs nothing from the module that
 * provides it.
 */
import { Data, type Effect } from "effect"
import type { GenerationKey } from "../Domain/RequestContext.ts"

export interface RateDecision {
  readonly allowed: boolean
  readonly limit: number
  /** Admissions left in the window after this hit. */
  readonly remaining: number
  /** Whole seconds until the oldest admitted hit leaves the window (0 when none). */
  readonly resetSeconds: number
  /** Seconds to wait before a retry can succeed (≥ 1 when refused, 0 when admitted). */
  readonly retryAfterSeconds: number
  /**
   * The value of the `read` key of the hit, when one was asked and the store is shared (Redis;
   * the in-process store has none): it came in the same round trip.
   */
  readonly observed?: string | undefined
}

/** The store could not decide (Redis down or not answering); the fail mode decides instead. */
export class RateLimiterUnavailable extends Data.TaggedError("RateLimiterUnavailable")<{ readonly cause: unknown }> {}

/** A hit that may be taken back (`reserve`). */
export interface Reservation {
  readonly decision: RateDecision
  /**
   * Takes the admission back, as if the hit had never been admitted (nothing when it was refused
   * or has already left the window).
   */
  readonly release: Effect.Effect<void, RateLimiterUnavailable>
}

export interface RateLimiterShape {
  /**
   * One hit. `read`: a generation (REDIS_KEY_PREFIX added by the store) whose value the decision
   * carries as `observed`, initialised when missing (Store/RedisLua.ts `clockCounterLua`,
   * `clockRecordLua`); the read cache's generations (Authors/ReadCache.ts).
   */
  readonly hit: (key: string, limit: number, windowMs: number, read?: GenerationKey) => Effect.Effect<RateDecision, RateLimiterUnavailable>
  /**
   * `hit`, with the means to take the admission back: a budget for outcomes known only later
   * (failed logins: docs/errors-and-limits.md#failed-logins) is reserved before the attempt, atomically, and released when the
   * outcome does not count — so concurrent attempts can never overrun it.
   */
  readonly reserve: (key: string, limit: number, windowMs: number) => Effect.Effect<Reservation, RateLimiterUnavailable>
}

export const decision = (
  allowed: boolean,
  limit: number,
  count: number,
  oldest: number | undefined,
  now: number,
  windowMs: number,
  observed?: string
): RateDecision => {
  const untilFree = oldest === undefined ? 0 : Math.max(0, oldest + windowMs - now)
  return {
    allowed,
    limit,
    remaining: Math.max(0, limit - count),
    resetSeconds: Math.ceil(untilFree / 1000),
    retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil(untilFree / 1000)),
    observed
  }
}
