/**
 * Bearer authentication and RBAC for HttpApi groups: the server's implementation of the
 * `Authentication` middleware (its tag is in Middleware.ts, with the contracts). The role an endpoint
 * needs is an annotation on the endpoint (`RequiredRoles`), checked here — before the request is validated, so the
 * order is 401 → 403 → 422 (docs/errors-and-limits.md#check-order): HttpApi decodes params, query and payload inside the
 * effect this middleware wraps (http-api/HttpApiBuilder.ts `applyMiddleware`).
 */
import { Context, Effect, Layer } from "effect"
import { HttpServerRequest } from "effect/http"
import { CurrentUser, type Principal } from "../Domain/User.ts"
import { Unauthenticated } from "../Errors.ts"
import { getRequestContext } from "../Domain/RequestContext.ts"
import { authAttemptsTotal } from "../Observability/Metrics.ts"
import { Authentication, RequiredRoles } from "./Middleware.ts"
import { requireRoles } from "./Rbac.ts"
import { bearerToken, TokenVerifier } from "./TokenVerifier.ts"

/** Verifies an `Authorization` header value; counts `auth_attempts_total`. */
export const authenticateHeader = (
  verifier: TokenVerifier["Service"],
  header: string | undefined
): Effect.Effect<Principal, Unauthenticated> => {
  const token = bearerToken(header)
  if (token === undefined) return Effect.fail(Unauthenticated.missing)
  return verifier.verify(token).pipe(
    Effect.tap(() => Effect.sync(() => authAttemptsTotal.inc({ status: "success" }))),
    Effect.catch((rejected) =>
      Effect.andThen(
        Effect.sync(() => authAttemptsTotal.inc({ status: rejected.reason === "expired" ? "token_expired" : "failed" })),
        Effect.fail(Unauthenticated.invalid)
      )
    )
  )
}

/**
 * Authentication of the current request. The front door authenticates once, before the app,
 * and leaves the outcome in the immutable RequestContext (`auth`): the rate limiter (which keys
 * by user), this middleware, the logs, metrics and the audit record all see that one outcome.
 * Outside the front door (no context, or nothing asked yet) the header is verified here.
 */
export const authenticateRequest = (verifier: TokenVerifier["Service"]) =>
  Effect.gen(function*() {
    const context = yield* getRequestContext
    if (context?.auth !== undefined) return yield* context.auth
    const request = yield* HttpServerRequest.HttpServerRequest
    return yield* authenticateHeader(verifier, request.headers["authorization"])
  })

/**
 * The middleware. The credential HttpApi decoded is not used: the header is read as the
 * contract reads it (`bearerToken`: any case, spaces or tabs), the same way for HTTP and the
 * rate limiter. The roles come from the endpoint's `RequiredRoles` annotation.
 */
export const layer: Layer.Layer<Authentication, never, TokenVerifier> = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const verifier = yield* TokenVerifier
    return Authentication.of({
      bearer: (httpEffect, { endpoint }) =>
        Effect.gen(function*() {
          const principal = yield* authenticateRequest(verifier)
          const roles = Context.getOrUndefined(endpoint.annotations, RequiredRoles)
          if (roles !== undefined) yield* requireRoles(principal, roles)
          return yield* Effect.provideService(httpEffect, CurrentUser, principal)
        })
    })
  })
)
