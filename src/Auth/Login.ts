/**
 * Logging in (docs/http-api.md#logging-in): the failed-login throttle, the identity provider's call, the
 * `auth_attempts_total` count and the audit record of every attempt — username as sent, never the
 * password. The HTTP handler (Http.ts) only maps its answer to the transport.
 */
import { Context, Effect, Exit, Layer, Option } from "effect"
import { decodeJwt } from "jose"
import { AuditLog } from "../AuditLogs/AuditLog.ts"
import { loginEntry } from "../AuditLogs/Entries.ts"
import { captureRequestData } from "../AuditLogs/RequestData.ts"
import { AppConfig } from "../Config.ts"
import { getRequestContext } from "../Domain/RequestContext.ts"
import {
  type ClientError,
  errorStatus,
  type IdentityProviderUnavailable,
  type InvalidCredentials,
  type InvalidRefreshToken,
  type TooManyFailedLogins
} from "../Errors.ts"
import { authAttemptsTotal, rateLimitHitsTotal } from "../Observability/Metrics.ts"
import { RateLimiter } from "../RateLimit/RateLimiter.ts"
import type { TokenResponse } from "./Api.ts"
import { IdentityProvider } from "./IdentityProvider.ts"
import { makeLoginThrottle } from "./LoginThrottle.ts"
import { rolesOf } from "./TokenVerifier.ts"

/** Who a freshly issued access token names (it comes straight from the provider). */
const subjectOf = (tokens: TokenResponse, clientId: string) => {
  try {
    const claims = decodeJwt(tokens.access_token)
    return {
      id: typeof claims.sub === "string" ? claims.sub : "",
      username: typeof claims["preferred_username"] === "string" ? claims["preferred_username"] : undefined,
      roles: rolesOf(claims, clientId)
    }
  } catch {
    return { id: "", username: undefined, roles: [] }
  }
}

const make = Effect.gen(function*() {
  const idp = yield* IdentityProvider
  const audit = yield* AuditLog
  const config = yield* AppConfig
  const clientId = config.oidcClientId
  const throttle = makeLoginThrottle(yield* RateLimiter, {
    maxFailures: config.loginMaxFailures,
    windowSeconds: config.loginFailureWindowSeconds,
    failMode: config.rateLimitFailMode
  })

  /** Every login attempt is audited (docs/audit.md#what-is-recorded), with the status its answer has. */
  const recordAttempt = (action: string, username: string, exit: Exit.Exit<TokenResponse, ClientError>) =>
    Effect.gen(function*() {
      const ctx = yield* getRequestContext
      if (ctx === undefined) return
      // A failure the table knows (the provider's errors, the throttle's), else a defect or an interruption: 500.
      const error = Option.getOrUndefined(Exit.findErrorOption(exit))
      const status = Exit.isSuccess(exit) ? 200 : error === undefined ? 500 : errorStatus[error._tag].http
      const subject = Exit.isSuccess(exit) ? subjectOf(exit.value, clientId) : { id: "", username: undefined, roles: [] }
      yield* audit.record(loginEntry(ctx, { ...subject, username: subject.username ?? username }, {
        action_type: "POST",
        resource: action,
        response_status: status,
        request_data: captureRequestData(undefined, username === "" ? undefined : { username, password: "[REDACTED]" }),
        error_message: error !== undefined ? error.detail : null
      }))
    })

  const login = (
    username: string,
    password: string
  ): Effect.Effect<TokenResponse, InvalidCredentials | IdentityProviderUnavailable | TooManyFailedLogins> =>
    throttle.guard(username, idp.login(username, password), (error) => error._tag === "InvalidCredentials").pipe(
      Effect.onExit((exit) =>
        Effect.andThen(
          Effect.sync(() => {
            authAttemptsTotal.inc({ status: Exit.isSuccess(exit) ? "success" : "failed" })
            // A refused attempt is answered 429, and like every HTTP 429 it is a
            // `rate_limit_hits_total{limit_type="http"}` (docs/operations.md#metrics--get-metrics).
            const error = Option.getOrUndefined(Exit.findErrorOption(exit))
            if (error?._tag === "TooManyFailedLogins") rateLimitHitsTotal.inc({ limit_type: "http" })
          }),
          recordAttempt("/login", username, exit)
        )
      )
    )

  const refresh = (refreshToken: string): Effect.Effect<TokenResponse, InvalidRefreshToken | IdentityProviderUnavailable> =>
    idp.refresh(refreshToken).pipe(Effect.onExit((exit) => recordAttempt("/login/refresh", "", exit)))

  return { login, refresh } as const
})

export class Login extends Context.Service<Login>()("Auth/Login", { make }) {
  /** Needs the `IdentityProvider`, the `AuditLog`, the `RateLimiter` and the configuration. */
  static readonly layer = Layer.effect(Login, make)
}
