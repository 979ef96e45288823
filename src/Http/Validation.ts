/**
 * FastAPI-shaped validation errors (CONTRACT §3): `422 {detail: [{type, loc, msg, input}]}` for
 * every schema failure (HttpApi's own answer is a 400 that does not say which part failed),
 * malformed JSON and wrong content types. The part (`path`, `query`, `body`) comes from a table
 * of each endpoint's parameter names, built once from the API.
 */
import { HttpApi, type HttpServerRequest } from "@effect/platform"
import type { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { Option, type ParseResult, type SchemaAST } from "effect"

export interface ValidationIssue {
  readonly type: string
  readonly loc: ReadonlyArray<string | number>
  readonly msg: string
  readonly input: unknown
}

interface EndpointShape {
  readonly method: string
  /** The route template as OpenAPI writes it: `/authors/{author_id}`. */
  readonly template: string
  readonly pattern: RegExp
  readonly pathParams: ReadonlyArray<string>
  readonly pathKeys: ReadonlySet<string>
  readonly queryKeys: ReadonlySet<string>
  readonly hasPayload: boolean
}

const propertyNames = (ast: SchemaAST.AST): ReadonlyArray<string> => {
  switch (ast._tag) {
    case "TypeLiteral":
      return ast.propertySignatures.map((p) => String(p.name))
    case "Transformation":
      return propertyNames(ast.from)
    case "Refinement":
      return propertyNames(ast.from)
    case "Suspend":
      return propertyNames(ast.f())
    case "Union":
      return ast.types.flatMap(propertyNames)
    default:
      return []
  }
}

export const endpointShapes = (api: HttpApi.HttpApi.Any): ReadonlyArray<EndpointShape> => {
  const shapes: Array<EndpointShape> = []
  HttpApi.reflect(api as HttpApi.HttpApi.AnyWithProps, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      const pathParams: Array<string> = []
      const source = endpoint.path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:(\w+)/g, (_, name: string) => {
        pathParams.push(name)
        return "([^/]+)"
      })
      shapes.push({
        method: endpoint.method,
        template: endpoint.path.replace(/:(\w+)/g, "{$1}"),
        pattern: new RegExp(`^${source}/?$`),
        pathParams,
        pathKeys: new Set(Option.match(endpoint.pathSchema, { onNone: () => [], onSome: (s) => propertyNames(s.ast) })),
        queryKeys: new Set(Option.match(endpoint.urlParamsSchema, { onNone: () => [], onSome: (s) => propertyNames(s.ast) })),
        hasPayload: Option.isSome(endpoint.payloadSchema)
      })
    }
  })
  return shapes
}

/**
 * A schema issue as FastAPI would name it: the `type|message` convention of Params.ts, else a
 * type guessed from the issue. `part` is where the value came from (`body` for a root failure).
 */
export const describeIssue = (issue: ParseResult.ArrayFormatterIssue, part: string): { type: string; msg: string } => {
  const bar = issue.message.indexOf("|")
  if (bar > 0 && /^[a-z_]+$/.test(issue.message.slice(0, bar))) {
    return { type: issue.message.slice(0, bar), msg: issue.message.slice(bar + 1) }
  }
  if (issue._tag === "Missing") return { type: "missing", msg: "Field required" }
  if (issue._tag === "Unexpected") return { type: "extra_forbidden", msg: "Extra inputs are not permitted" }
  if (issue._tag === "Type") {
    if (issue.path.length === 0 && part === "body") {
      return { type: "model_attributes_type", msg: "Input should be a valid dictionary or object to extract fields from" }
    }
    if (/^Expected string/.test(issue.message)) return { type: "string_type", msg: "Input should be a valid string" }
    if (/^Expected (\{|Struct)/.test(issue.message)) return { type: "dict_type", msg: "Input should be a valid dictionary" }
    if (/^Expected (a finite number|number|an integer|Int)/.test(issue.message)) {
      return { type: "int_type", msg: "Input should be a valid integer" }
    }
  }
  return { type: "value_error", msg: issue.message }
}

const pick = (value: unknown, path: ReadonlyArray<PropertyKey>): unknown => {
  let current = value
  for (const key of path) {
    if (typeof current !== "object" || current === null) return null
    current = (current as Record<PropertyKey, unknown>)[key]
  }
  return current === undefined ? null : current
}

export interface RequestView {
  readonly method: string
  readonly pathname: string
  readonly query: URLSearchParams
  readonly body: unknown
}

export const requestView = (request: HttpServerRequest.HttpServerRequest, body: unknown): RequestView => {
  const url = new URL(request.url, "http://localhost")
  return { method: request.method, pathname: url.pathname, query: url.searchParams, body }
}

/** Turns HttpApi's decode error into the FastAPI issue list. */
export const toValidationIssues = (
  shapes: ReadonlyArray<EndpointShape>,
  error: HttpApiDecodeError,
  request: RequestView
): ReadonlyArray<ValidationIssue> => {
  const shape = shapes.find((s) => s.method === request.method && s.pattern.test(request.pathname))
  // `optional`/`optionalWith` unions add an "Expected undefined" alternative: noise for a client.
  return error.issues.filter((issue) => !issue.message.startsWith("Expected undefined")).map((issue) => {
    const head = issue.path[0]
    const key = typeof head === "string" ? head : undefined
    const part = key !== undefined && shape?.pathKeys.has(key)
      ? "path"
      : key !== undefined && shape?.queryKeys.has(key)
      ? "query"
      : shape?.hasPayload === true
      ? "body"
      : "query"
    const { type, msg } = describeIssue(issue, part)
    let input: unknown = null
    if (part === "path" && shape !== undefined && key !== undefined) {
      const match = shape.pattern.exec(request.pathname)
      const index = shape.pathParams.indexOf(key)
      const raw = index >= 0 ? match?.[index + 1] : undefined
      input = raw === undefined ? null : safeDecode(raw)
    } else if (part === "query" && key !== undefined) {
      input = request.query.get(key)
    } else if (part === "body") {
      input = pick(request.body, issue.path)
    }
    if (issue._tag === "Missing") input = part === "body" ? pick(request.body, issue.path.slice(0, -1)) : null
    return { type, loc: [part, ...issue.path.map((p) => typeof p === "number" ? p : String(p))], msg, input }
  })
}

const safeDecode = (s: string) => {
  try {
    return decodeURIComponent(s)
  } catch {
    return s
  }
}

/** The 422 body for a body that is not JSON. */
export const jsonInvalid = (message: string): ReadonlyArray<ValidationIssue> => [
  { type: "json_invalid", loc: ["body", 0], msg: `JSON decode error: ${message}`, input: {} }
]

/** Wrong content type for a JSON body (FastAPI answers the same way). */
export const contentTypeInvalid = (contentType: string): ReadonlyArray<ValidationIssue> => [
  {
    type: "model_attributes_type",
    loc: ["body"],
    msg: "Input should be a valid dictionary or object to extract fields from",
    input: contentType
  }
]

const ValidationErrorSchema = {
  type: "object",
  properties: {
    detail: {
      type: "array",
      items: {
        type: "object",
        required: ["type", "loc", "msg", "input"],
        properties: {
          type: { type: "string" },
          loc: { type: "array", items: { anyOf: [{ type: "string" }, { type: "integer" }] } },
          msg: { type: "string" },
          input: {}
        }
      }
    }
  },
  required: ["detail"]
}

/** OpenAPI: HttpApi documents validation failures as 400; this service answers them with 422. */
export const openApi422 = <S extends Record<string, unknown>>(spec: S): S => {
  const paths = spec["paths"] as Record<string, Record<string, { responses?: Record<string, unknown> }>>
  for (const item of Object.values(paths)) {
    for (const operation of Object.values(item)) {
      const responses = operation.responses
      if (responses?.["400"] !== undefined && !JSON.stringify(responses["400"]).includes("InvalidFilename")) {
        delete responses["400"]
        responses["422"] = {
          description: "Validation error",
          content: { "application/json": { schema: { $ref: "#/components/schemas/HTTPValidationError" } } }
        }
      }
    }
  }
  const components = spec["components"] as { schemas: Record<string, unknown> }
  components.schemas["HTTPValidationError"] = ValidationErrorSchema
  return spec
}

