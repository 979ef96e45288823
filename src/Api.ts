/** The HTTP API: every group, one document (served at /openapi.json). */
import { Layer, Schema } from "effect"
import { HttpApi, HttpApiMiddleware, OpenApi } from "effect/http-api"
import { AuditLogsApi } from "./AuditLogs/Api.ts"
import { LoginApi } from "./Auth/Api.ts"
import { AuthorsApi } from "./Authors/Api.ts"
import { Wire } from "./Errors.ts"
import { SystemApi } from "./Observability/Api.ts"
import { ProfilingApi } from "./Profiling/Api.ts"

/**
 * The FastAPI validation body (CONTRACT §3): `422 {detail: [{type, loc, msg, input}]}`. Declared
 * here, it documents every operation's 422 (Effect 4 documents no decode failure by itself).
 */
export const ValidationErrorBody = Schema.Struct({
  detail: Schema.Array(Schema.Struct({
    type: Schema.String,
    loc: Schema.Array(Schema.Union([Schema.String, Schema.Int])),
    msg: Schema.String,
    input: Schema.Unknown
  }))
}).annotate({ identifier: "HTTPValidationError", description: "Validation error", httpApiStatus: 422 })

/**
 * Answers any endpoint may give that no handler gives: the front door's 413, 429 and 500
 * (Http/FrontDoor.ts) and the 422 of a request that fails validation. Effect 4 has no API-wide
 * error list, so they are the errors of a middleware on every endpoint — which is what puts
 * them on every operation of the OpenAPI document. The middleware itself does nothing.
 */
export class CommonResponses extends HttpApiMiddleware.Service<CommonResponses>()("Api/CommonResponses", {
  error: [ValidationErrorBody, Wire.PayloadTooLarge, Wire.RateLimited, Wire.InternalError]
}) {
  /** It does nothing: it is there for the errors it declares. */
  static readonly layer: Layer.Layer<CommonResponses> = Layer.succeed(CommonResponses, (httpEffect) => httpEffect)
}

/**
 * HTTP authentication scheme names are case-insensitive (RFC 9110 §11.1), and OpenAPI documents and
 * generators use them lower-case (`"scheme": "bearer"`); HttpApi writes `"Bearer"`.
 */
function lowercaseHttpSchemes(spec: Record<string, unknown>): Record<string, unknown> {
  const schemes = (spec["components"] as { securitySchemes?: Record<string, { type?: string; scheme?: string }> } | undefined)?.securitySchemes
  for (const scheme of Object.values(schemes ?? {})) {
    if (scheme.type === "http" && typeof scheme.scheme === "string") scheme.scheme = scheme.scheme.toLowerCase()
  }
  return spec
}

export class Api extends HttpApi.make("author-directory")
  .add(AuthorsApi)
  .add(LoginApi)
  .add(AuditLogsApi)
  .add(SystemApi)
  .add(ProfilingApi)
  // After every group: a middleware is added to the endpoints the API has when it is applied.
  .middleware(CommonResponses)
  .annotate(OpenApi.Title, "Author Directory Service")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(OpenApi.Description, "Authors over HTTP and WebSocket (`/web`, see `/asyncapi.json`), with OIDC bearer authentication and role-based access.")
  .annotate(OpenApi.Transform, lowercaseHttpSchemes)
{}
