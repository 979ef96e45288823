/**
 * FastAPI-shaped validation errors (docs/errors-and-limits.md#validation-errors-422): `422 {detail: [{type, loc, msg, input}]}` for
 * every schema failure (HttpApi's own answer is an empty 400 that does not say which part failed),
 * malformed JSON and wrong content types. HttpApi names the part that failed
 * (`HttpApiSchemaError.kind`: Params, Query, Payload); the issue tree of its `SchemaError` gives
 * the path inside it and the message, whose `type|message` convention comes from Domain/Params.ts.
 */
import { SchemaAST, SchemaIssue } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApi, type HttpApiError, type HttpApiGroup, HttpApiMiddleware } from "effect/http-api"
import { annotatedMessage, meant, splitIssue } from "../Domain/Params.ts"

export interface ValidationIssue {
  readonly type: string
  readonly loc: ReadonlyArray<string | number>
  readonly msg: string
  readonly input: unknown
}

export interface EndpointShape {
  readonly method: string
  /** The route template as OpenAPI writes it: `/authors/{author_id}`. */
  readonly template: string
  readonly pattern: RegExp
  readonly pathParams: ReadonlyArray<string>
  /** Guarded by a security middleware (bearer authentication). */
  readonly secured: boolean
}

/**
 * The routes beside the HttpApi on the same router, all GET: the OpenAPI document (HttpApiBuilder,
 * App.ts), the docs pages (Docs.ts), and the WebSocket's path and companions (Ws/Http.ts). Listed
 * here so that a wrong method on them is a 405 and their requests are labelled by path.
 */
export const PLAIN_GET_PATHS: ReadonlyArray<string> = [
  "/openapi.json", "/docs", "/redoc", "/web", "/proto/websocket.proto", "/asyncapi.json"
]

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/** As the router matches: a trailing slash and the case of the path do not matter. */
const patternOf = (source: string) => new RegExp(`^${source}/?$`, "i")

/**
 * Every route of the router, built once at startup: the API's endpoints (route templates, path
 * patterns, guards) and the plain GET routes beside them.
 */
export const endpointShapes = <Id extends string, Groups extends HttpApiGroup.Constraint>(
  api: HttpApi.HttpApi<Id, Groups>
): ReadonlyArray<EndpointShape> => {
  const shapes: Array<EndpointShape> = []
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint, middleware }) => {
      const pathParams: Array<string> = []
      const source = escapeRegExp(endpoint.path).replace(/:(\w+)/g, (_, name: string) => {
        pathParams.push(name)
        return "([^/]+)"
      })
      shapes.push({
        method: endpoint.method,
        template: endpoint.path.replace(/:(\w+)/g, "{$1}"),
        pattern: patternOf(source),
        pathParams,
        secured: [...middleware].some((key) => HttpApiMiddleware.isSecurity(key))
      })
    }
  })
  for (const path of PLAIN_GET_PATHS) {
    shapes.push({ method: "GET", template: path, pattern: patternOf(escapeRegExp(path)), pathParams: [], secured: false })
  }
  return shapes
}

export const findShape = (shapes: ReadonlyArray<EndpointShape>, method: string, pathname: string): EndpointShape | undefined => {
  for (const shape of shapes) {
    if (shape.method === method && shape.pattern.test(pathname)) return shape
  }
  return undefined
}

/** The path as the router matches it: duplicate slashes are one (FindMyWay `ignoreDuplicateSlashes`). */
export const routedPath = (pathname: string) => pathname.includes("//") ? pathname.replace(/\/{2,}/g, "/") : pathname

/**
 * The shapes of the route a path belongs to, whatever the method: the template with the fewest
 * parameters among those matching (the router prefers static segments, so `/authors/paginated`
 * is its own route, not an `{author_id}`). Empty for a path no route serves.
 */
const routeOfPath = (shapes: ReadonlyArray<EndpointShape>, pathname: string): ReadonlyArray<EndpointShape> => {
  let best: EndpointShape | undefined
  for (const shape of shapes) {
    if (shape.pattern.test(pathname) && (best === undefined || shape.pathParams.length < best.pathParams.length)) best = shape
  }
  if (best === undefined) return []
  const template = best.template
  return shapes.filter((shape) => shape.template === template)
}

const METHOD_ORDER = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

/**
 * The methods a path's route serves, for `Allow`: HEAD wherever GET is (the router answers HEAD
 * with the GET route). Empty for an unknown path.
 */
export const allowedMethods = (shapes: ReadonlyArray<EndpointShape>, pathname: string): ReadonlyArray<string> => {
  const methods = new Set(routeOfPath(shapes, pathname).map((shape) => shape.method))
  if (methods.has("GET")) methods.add("HEAD")
  const rank = (method: string) => {
    const index = METHOD_ORDER.indexOf(method)
    return index === -1 ? METHOD_ORDER.length : index
  }
  return [...methods].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
}

/**
 * The route template of a request, for metrics and span names: its endpoint's, or — for a method
 * the path does not serve (a 405, HEAD) — the path's route's. Undefined for an unknown path.
 */
export const routeTemplate = (shapes: ReadonlyArray<EndpointShape>, method: string, pathname: string): string | undefined =>
  findShape(shapes, method, pathname)?.template ?? routeOfPath(shapes, pathname)[0]?.template

/** One failure of the issue tree: where (inside its part), the leaf that failed, its message. */
export interface FlatIssue {
  readonly path: ReadonlyArray<PropertyKey>
  readonly tag: SchemaIssue.Leaf["_tag"] | "AnyOf"
  /** The schema a value of the wrong type was checked against (InvalidType, empty AnyOf). */
  readonly ast: SchemaAST.AST | undefined
  readonly message: string
}

const standard = SchemaIssue.makeFormatterStandardSchemaV1()

/** Flattens an issue tree as Effect's own formatters do, keeping each leaf's tag and schema. */
export const flattenIssue = (issue: SchemaIssue.Issue): ReadonlyArray<FlatIssue> => {
  const out: Array<FlatIssue> = []
  const walk = (node: SchemaIssue.Issue, path: ReadonlyArray<PropertyKey>, override: string | undefined): void => {
    switch (node._tag) {
      case "Pointer":
        return walk(node.issue, [...path, ...node.path], override)
      case "Encoding":
        return walk(node.issue, path, override)
      case "Filter":
        // A check without a message of its own is described by Effect ("Expected an integer, …").
        return walk(node.issue, path, override ?? annotatedMessage(node.filter.annotations) ?? standard(node).issues[0]?.message)
      case "Composite":
        for (const inner of node.issues) walk(inner, path, override)
        return
      case "AnyOf":
        if (node.issues.length > 0) {
          for (const inner of node.issues) walk(inner, path, override)
          return
        }
        out.push({ path, tag: "AnyOf", ast: node.ast, message: override ?? standard(node).issues[0]?.message ?? "Invalid input" })
        return
      default:
        out.push({
          path,
          tag: node._tag,
          ast: node._tag === "InvalidType" ? node.ast : undefined,
          message: override ?? SchemaIssue.defaultLeafHook(node)
        })
    }
  }
  walk(issue, [], undefined)
  // `optional` fields are `X | undefined`: the undefined alternative is noise for a client.
  return out.filter((flat, _, all) =>
    !(flat.ast?._tag === "Undefined" && all.some((other) => other !== flat && other.path.join("\0") === flat.path.join("\0")))
  )
}

/**
 * A schema issue as FastAPI would name it: the `type|message` convention of Params.ts, else a type
 * named from the leaf. `part` is where the value came from (`body` for a root failure).
 */
export const describeIssue = (issue: FlatIssue, part: string): { type: string; msg: string } => {
  const split = splitIssue(issue.message)
  if (split !== undefined) return { type: split.type, msg: split.msg }
  if (issue.tag === "MissingKey") return { type: "missing", msg: "Field required" }
  if (issue.tag === "UnexpectedKey") return { type: "extra_forbidden", msg: "Extra inputs are not permitted" }
  if ((issue.tag === "InvalidType" || issue.tag === "AnyOf") && issue.ast !== undefined) {
    const target = meant(issue.ast)
    const own = target === issue.ast ? undefined : annotatedMessage(target.annotations)
    const ownSplit = own === undefined ? undefined : splitIssue(own)
    if (ownSplit !== undefined) return { type: ownSplit.type, msg: ownSplit.msg }
    if (issue.path.length === 0 && part === "body") {
      return { type: "model_attributes_type", msg: "Input should be a valid dictionary or object to extract fields from" }
    }
    switch (target._tag) {
      case "String":
        return { type: "string_type", msg: "Input should be a valid string" }
      case "Objects":
        return { type: "dict_type", msg: "Input should be a valid dictionary" }
      case "Number":
        return { type: "int_type", msg: "Input should be a valid integer" }
    }
  }
  if (/^Expected (a finite number|number|an integer|Int)\b/.test(issue.message)) {
    return { type: "int_type", msg: "Input should be a valid integer" }
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

const partOf = (kind: HttpApiError.HttpApiSchemaError["kind"]): string =>
  kind === "Params" ? "path" : kind === "Query" ? "query" : kind === "Headers" ? "header" : "body"

/** Turns HttpApi's decode error into the FastAPI issue list. */
export const toValidationIssues = (
  shapes: ReadonlyArray<EndpointShape>,
  error: HttpApiError.HttpApiSchemaError,
  request: RequestView
): ReadonlyArray<ValidationIssue> => {
  const shape = findShape(shapes, request.method, request.pathname)
  const part = partOf(error.kind)
  return flattenIssue(error.cause.issue).map((issue) => {
    const head = issue.path[0]
    const key = typeof head === "string" ? head : undefined
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
    if (issue.tag === "MissingKey") input = part === "body" ? pick(request.body, issue.path.slice(0, -1)) : null
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
