/**
 * The authentication middleware as the contract sees it: its tag (what it provides, the errors it
 * may answer, the bearer scheme) and the endpoint annotation naming the roles an endpoint needs.
 * Contracts and the client kit import this; the implementation (Authentication.ts) stays on the
 * server, with the token verifier and the metrics it needs.
 */
import { Context } from "effect"
import { HttpApiMiddleware, HttpApiSecurity } from "effect/http-api"
import type { CurrentUser, Role } from "../Domain/User.ts"
import { Wire } from "../Errors.ts"

/** Endpoint annotation: the roles the caller must all hold. */
export class RequiredRoles extends Context.Service<RequiredRoles, ReadonlyArray<Role>>()("Auth/RequiredRoles") {}

export class Authentication extends HttpApiMiddleware.Service<Authentication, {
  provides: CurrentUser
}>()("Auth/Authentication", {
  error: [Wire.Unauthenticated, Wire.Forbidden],
  security: { bearer: HttpApiSecurity.bearer }
}) {}
