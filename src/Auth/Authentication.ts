/**
 * Bearer authentication and RBAC for HttpApi groups. The role an endpoint needs is an annotation
 * on the endpoint (`RequiredRoles`), checked here — before the request is validated, so the
 * order is 401 → 403 → 422 (CONTRACT §9).
 */
import { HttpApiMiddleware, HttpApiSecurity, HttpRouter, HttpServerRequest } from "@effect/platform"
import { Context, Effect, Schema } from "effect"
import { CurrentUser, type Principal, type Role } from "../Domain/User.ts"
import { Unauthenticated, Wire } from "../Errors.ts"
import { getRequestContext } from "../Http/RequestContext.ts"
import { authAttemptsTotal } from "../Observability/Metrics.ts"
import { requireRoles } from "./Rbac.ts"
import { bearerToken, TokenVerifier } from "./TokenVerifier.ts"

/** Endpoint annotation: the roles the caller must all hold. */
export class RequiredRoles extends Context.Tag("Auth/RequiredRoles")<RequiredRoles, ReadonlyArray<Role>>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Auth/Authentication", {
  failure: Schema.Union(Wire.Unauthenticated, Wire.Forbidden),
  provides: CurrentUser,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

/** Verifies an `Authorization` header value; counts `auth_attempts_total`. */
export const authenticateHeader = (
  verifier: Context.Tag.Service<TokenVerifier>,
  header: string | undefined
): Effect.Effect<Principal, Unauthenticated> => {
  const token = bearerToken(header)
  if (token === undefined) return Effect.fail(Unauthenticated.missing)
  return verifier.verify(token).pipe(
    Effect.tap(() => Effect.sync(() => authAttemptsTotal.inc({ status: "success" }))),
    Effect.catchAll((rejected) =>
      Effect.zipRight(
        Effect.sync(() => authAttemptsTotal.inc({ status: rejected.reason === "expired" ? "token_expired" : "failed" })),
        Effect.fail(Unauthenticated.invalid)
      )
    )
  )
}

/** Authentication of the current request, memoized on its RequestContext. */
export const authenticateRequest = (verifier: Context.Tag.Service<TokenVerifier>) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const context = yield* getRequestContext
    if (context === undefined) return yield* authenticateHeader(verifier, request.headers["authorization"])
    context.auth ??= yield* Effect.exit(authenticateHeader(verifier, request.headers["authorization"]))
    const principal = yield* context.auth
    context.user = principal
    return principal
  })

/** `rolesByRoute` maps "METHOD /path/:param" (the router's template) to the roles it needs. */
export const AuthenticationLive = (rolesByRoute: ReadonlyMap<string, ReadonlyArray<Role>>) =>
  Effect.gen(function*() {
    const verifier = yield* TokenVerifier
    return Authentication.of({
      bearer: () =>
        Effect.gen(function*() {
          const principal = yield* authenticateRequest(verifier)
          const route = yield* HttpRouter.RouteContext
          const roles = rolesByRoute.get(`${route.route.method} ${route.route.path}`)
          if (roles !== undefined) yield* requireRoles(principal, roles)
          return principal
        })
    })
  })
