import { Effect, Exit, Option } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { decodeJwt } from "jose"
import { Api } from "../Api.ts"
import { AuditLog } from "../AuditLogs/AuditLog.ts"
import { captureRequestData } from "../AuditLogs/RequestData.ts"
import { AppConfig } from "../Config.ts"
import { type ClientError, errorStatus } from "../Errors.ts"
import { loginEntry } from "../Edge/AuditEntries.ts"
import { getRequestContext } from "../Domain/RequestContext.ts"
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

export const LoginHttpLive = HttpApiBuilder.group(
  Api,
  "login",
  Effect.fn(function*(handlers) {
    const idp = yield* IdentityProvider
    const audit = yield* AuditLog
    const config = yield* AppConfig
    const clientId = config.oidcClientId
    const throttle = makeLoginThrottle(yield* RateLimiter, {
      maxFailures: config.loginMaxFailures,
      windowSeconds: config.loginFailureWindowSeconds,
      failMode: config.rateLimitFailMode
    })

    /** Every login attempt is audited (docs/audit.md#what-is-recorded): username as sent, never the password. */
    const recordAttempt = (
      action: string,
      username: string,
      exit: Exit.Exit<TokenResponse, ClientError>
    ) =>
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

    return handlers
      .handle("login", ({ payload }) =>
        throttle.guard(
          payload.username,
          idp.login(payload.username, payload.password),
          (error) => error._tag === "InvalidCredentials"
        ).pipe(
          Effect.onExit((exit) =>
            Effect.andThen(
              Effect.sync(() => authAttemptsTotal.inc({ status: Exit.isSuccess(exit) ? "success" : "failed" })),
              recordAttempt("/login", payload.username, exit)
            )
          ),
          // docs/errors-and-limits.md#failed-logins: the 429 carries Retry-After, which the declared error (Errors.ts: its status
          // and `{detail}` body) does not set; like every HTTP 429 it is a
          // `rate_limit_hits_total{limit_type="http"}` (docs/operations.md#metrics--get-metrics).
          Effect.catchTag("TooManyFailedLogins", (error) =>
            Effect.sync(() => {
              rateLimitHitsTotal.inc({ limit_type: "http" })
              return HttpServerResponse.jsonUnsafe({ detail: error.detail }, {
                status: errorStatus[error._tag].http,
                headers: { "retry-after": String(error.retryAfterSeconds) }
              })
            }))
        ))
      .handle("refresh", ({ payload }) =>
        idp.refresh(payload.refresh_token).pipe(
          Effect.onExit((exit) => recordAttempt("/login/refresh", "", exit))
        ))
  })
)
