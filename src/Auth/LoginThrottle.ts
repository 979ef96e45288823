/**
 * Failed-login slowing (docs/errors-and-limits.md#failed-logins): besides the per-IP limit, failures for one
 * username are counted across all IPs and instances (the RateLimiter store: Redis when configured),
 * and once `LOGIN_MAX_FAILURES` are in the trailing `LOGIN_FAILURE_WINDOW_SECONDS`, further
 * attempts for that username are refused — 429 `Too many failed login attempts` with
 * `Retry-After` — without the password being checked. The window slides: when the oldest failure
 * leaves it, one attempt is possible again, so the account's owner can log in after the window,
 * while a guesser spread over many addresses gets at most `LOGIN_MAX_FAILURES` guesses per window.
 *
 * Each attempt reserves a failure before the password is checked, atomically, and the reservation
 * is released unless the attempt failed with invalid credentials: concurrent attempts can never
 * get more guesses than the budget. Usernames are counted case-insensitively (Keycloak's are
 * case-insensitive), under a digest (any length, any character, fixed-size keys), and unknown
 * usernames exactly like known ones.
 */
import { Effect, Exit, Option } from "effect"
import { createHash } from "node:crypto"
import { TooManyFailedLogins } from "../Errors.ts"
import { makeAdmission } from "../RateLimit/Admission.ts"
import type { FailMode, RateLimiter } from "../RateLimit/RateLimiter.ts"

export interface LoginThrottleOptions {
  /** Failures per username in the window before attempts are refused; 0 switches slowing off. */
  readonly maxFailures: number
  readonly windowSeconds: number
  /** RATE_LIMIT_FAIL_MODE: the store unreachable → `open` lets the attempt through, `closed` refuses it. */
  readonly failMode: FailMode
}

/** The limiter key of a username's failures. */
export const failureKey = (username: string) =>
  `login-failures:${createHash("sha256").update(username.toLowerCase()).digest("base64url")}`

export const makeLoginThrottle = (limiter: RateLimiter["Service"], options: LoginThrottleOptions) => {
  const admission = makeAdmission(limiter, {
    limitType: "login",
    limit: options.maxFailures,
    windowMs: options.windowSeconds * 1000,
    failMode: options.failMode,
    releaseWarning: "Could not release a login attempt's reservation; it counts as a failure"
  })

  /**
   * Runs `attempt` for `username` unless its failures fill the window; the attempt counts as a
   * failure when it fails with an error `isFailure` accepts (wrong credentials), and only then.
   */
  const guard = <A, E, R>(
    username: string,
    attempt: Effect.Effect<A, E, R>,
    isFailure: (error: E) => boolean
  ): Effect.Effect<A, E | TooManyFailedLogins, R> => {
    if (options.maxFailures <= 0) return attempt
    return Effect.gen(function*() {
      const { admission: reserved, release } = yield* admission.reserve(failureKey(username))
      if (reserved._tag === "Refused") return yield* Effect.fail(TooManyFailedLogins.of(reserved.retryAfterSeconds))
      return yield* attempt.pipe(
        Effect.onExit((exit) => {
          const failed = Exit.isFailure(exit) && Option.match(Exit.findErrorOption(exit), {
            onNone: () => false,
            onSome: isFailure
          })
          return failed ? Effect.void : release
        })
      )
    })
  }

  return { guard } as const
}
