/**
 * Rate-limit admission, written once for every caller (docs/errors-and-limits.md#http-rate-limit): the HTTP request, the
 * WebSocket upgrade and message, the failed-login budget. Each asks `check` (or `reserve`, for a
 * budget whose outcome is known only later) and maps the answer to its transport: a 429 with
 * headers, a refused upgrade, an error reply or a close, a refused login.
 */
import { Effect, Option } from "effect"
import type { GenerationKey } from "../Domain/RequestContext.ts"
import type { RateDecision } from "./Decision.ts"
import { type FailMode, RATE_WINDOW_MS, type RateLimiter, withFailMode } from "./RateLimiter.ts"

export type Admission =
  /** `decision`: none when the store failed and the fail mode is open (no headers to send). */
  | { readonly _tag: "Admitted"; readonly decision: Option.Option<RateDecision> }
  | { readonly _tag: "Refused"; readonly decision: RateDecision; readonly retryAfterSeconds: number }

export interface AdmissionRule {
  /** The `limit_type` label of the store-failure count. */
  readonly limitType: string
  readonly limit: number
  /** RATE_WINDOW_MS unless given. */
  readonly windowMs?: number
  /** RATE_LIMIT_FAIL_MODE: the store unreachable → `open` admits, `closed` refuses. */
  readonly failMode: FailMode
  /** What the log says when a reservation could not be released (`reserve`). */
  readonly releaseWarning?: string
}

const admissionOf = (decision: Option.Option<RateDecision>): Admission =>
  Option.isSome(decision) && !decision.value.allowed
    ? { _tag: "Refused", decision: decision.value, retryAfterSeconds: decision.value.retryAfterSeconds }
    : { _tag: "Admitted", decision }

export const makeAdmission = (limiter: RateLimiter["Service"], rule: AdmissionRule) => {
  const windowMs = rule.windowMs ?? RATE_WINDOW_MS
  const failMode = withFailMode(rule.failMode, rule.limitType, rule.limit)
  return {
    /** One hit on `key`. `read`: a generation whose value the decision carries back (`observed`). */
    check: (key: string, read?: GenerationKey): Effect.Effect<Admission> =>
      Effect.map(failMode(limiter.hit(key, rule.limit, windowMs, read)), admissionOf),
    /**
     * A hit that can be taken back: `release` undoes an admission whose outcome does not count
     * (nothing when refused, or when the store failed). A failed release is logged: the hit
     * then counts.
     */
    reserve: (key: string): Effect.Effect<{ readonly admission: Admission; readonly release: Effect.Effect<void> }> => {
      let release: Effect.Effect<void> = Effect.void
      return Effect.map(
        failMode(Effect.map(limiter.reserve(key, rule.limit, windowMs), (reservation) => {
          release = reservation.release.pipe(
            Effect.catch((error) =>
              Effect.logWarning(rule.releaseWarning ?? "Could not release a rate-limit reservation; it counts as a hit").pipe(
                Effect.annotateLogs("reason", error.cause instanceof Error ? error.cause.message : String(error.cause))
              )
            )
          )
          return reservation.decision
        })),
        (decision) => ({ admission: admissionOf(decision), release })
      )
    }
  } as const
}
