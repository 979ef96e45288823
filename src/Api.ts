/** The HTTP API: every group, one document (served at /openapi.json). */
import { type JsonSchema, Layer, Schema } from "effect"
import { HttpApi, type HttpApiGroup, HttpApiMiddleware, OpenApi } from "effect/http-api"
import { AuditLogsApi } from "./AuditLogs/Api.ts"
import { LoginApi } from "./Auth/Api.ts"
import { AuthorsApi } from "./Authors/Api.ts"
import { parameterSchemaOf } from "./Domain/Params.ts"
import { Wire } from "./Errors.ts"
import { SystemApi } from "./Observability/Api.ts"
import { ProfilingApi } from "./Profiling/Api.ts"

/**
 * The FastAPI validation body (docs/errors-and-limits.md#validation-errors-422): `422 {detail: [{type, loc, msg, input}]}`. Declared
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

type OpenApiObject = Record<string, unknown>

const BaseApi = HttpApi.make("author-directory")
  .add(AuthorsApi)
  .add(LoginApi)
  .add(AuditLogsApi)
  .add(SystemApi)
  .add(ProfilingApi)
  // After every group: a middleware is added to the endpoints the API has when it is applied.
  .middleware(CommonResponses)

/**
 * The documented schema of every query and path parameter that has one (Domain/Params.ts
 * `documentedAs`), by operation (`get /authors/{author_id}`) and then by `in:name`.
 */
const documentedParameters = <Groups extends HttpApiGroup.Constraint>(api: HttpApi.HttpApi<string, Groups>) => {
  const byOperation = new Map<string, Map<string, JsonSchema.JsonSchema>>()
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      const documented = new Map<string, JsonSchema.JsonSchema>()
      for (const [where, schema] of [["path", endpoint.params], ["query", endpoint.query]] as const) {
        if (schema === undefined || schema.ast._tag !== "Objects") continue
        for (const property of schema.ast.propertySignatures) {
          const documentedSchema = parameterSchemaOf(property.type)
          if (documentedSchema !== undefined) documented.set(`${where}:${String(property.name)}`, documentedSchema)
        }
      }
      const path = endpoint.path.replace(/:(\w+)/g, "{$1}")
      if (documented.size > 0) byOperation.set(`${endpoint.method.toLowerCase()} ${path}`, documented)
    }
  })
  return byOperation
}

/**
 * Query and path parameters as what they decode to: HttpApi documents the text they arrive as
 * (every one a string), so a generated client would send `page` as a string.
 */
const typedParameters = (byOperation: ReadonlyMap<string, ReadonlyMap<string, JsonSchema.JsonSchema>>) =>
(spec: OpenApiObject): OpenApiObject => {
  for (const [path, item] of Object.entries((spec["paths"] ?? {}) as Record<string, OpenApiObject>)) {
    for (const [method, operation] of Object.entries(item)) {
      const documented = byOperation.get(`${method} ${path}`)
      const parameters = (operation as OpenApiObject)["parameters"]
      if (documented === undefined || !Array.isArray(parameters)) continue
      for (const parameter of parameters as Array<OpenApiObject>) {
        const schema = documented.get(`${String(parameter["in"])}:${String(parameter["name"])}`)
        if (schema !== undefined) parameter["schema"] = schema
      }
    }
  }
  return spec
}

const PASSWORD_FLOW_SCHEME = "oauth2"

/**
 * Swagger UI's "Authorize" dialog logs in with a username and password when the document offers
 * the OAuth2 password flow: it posts them form-encoded to `/login` (which takes that body as well
 * as JSON) and sends the access token it gets back as `Authorization: Bearer …`. Every operation
 * that takes the bearer scheme takes this one as an alternative: the same token, obtained there.
 */
function passwordFlow(spec: OpenApiObject): OpenApiObject {
  const components = (spec["components"] ??= {}) as OpenApiObject
  const schemes = (components["securitySchemes"] ??= {}) as OpenApiObject
  schemes[PASSWORD_FLOW_SCHEME] = {
    type: "oauth2",
    description: "Username and password exchanged at `POST /login` for a bearer token (the `bearer` scheme's).",
    flows: { password: { tokenUrl: "/login", scopes: {} } }
  }
  for (const item of Object.values((spec["paths"] ?? {}) as Record<string, OpenApiObject>)) {
    for (const operation of Object.values(item) as Array<OpenApiObject>) {
      const security = operation["security"]
      if (!Array.isArray(security)) continue
      const requirements = security as Array<Record<string, Array<string>>>
      if (requirements.some((r) => "bearer" in r) && !requirements.some((r) => PASSWORD_FLOW_SCHEME in r)) {
        requirements.push(...requirements.filter((r) => "bearer" in r).map(({ bearer: _, ...rest }) => ({ ...rest, [PASSWORD_FLOW_SCHEME]: [] })))
      }
    }
  }
  return spec
}

/** Read from the endpoints when a document is first made (the client kit imports the API and never makes one). */
let typed: ((spec: OpenApiObject) => OpenApiObject) | undefined

const documentTransform = (spec: OpenApiObject): OpenApiObject => {
  typed ??= typedParameters(documentedParameters(BaseApi))
  return passwordFlow(typed(lowercaseHttpSchemes(spec)))
}

export class Api extends BaseApi
  .annotate(OpenApi.Title, "Author Directory Service")
  .annotate(OpenApi.Version, "1.1.0")
  .annotate(OpenApi.Description, "Authors over HTTP and WebSocket (`/web`, see `/asyncapi.json`), with OIDC bearer authentication and role-based access.")
  .annotate(OpenApi.Transform, documentTransform)
{}
