/**
 * Front door: every failure becomes a JSON response (every error body is JSON with `detail`:
 * docs/errors-and-limits.md#http-errors): HttpApi's decode failures → the FastAPI 422 (Validation.ts), malformed JSON →
 * `json_invalid`, a wrong content type → 422, an unknown route → 404 `{detail: "Not Found"}`, a
 * method the path does not serve → 405 `{detail: "Method Not Allowed"}` with `Allow`, a
 * failing health check → 503 with the health report, and the rest → 500
 * `{detail: "Internal server error"}`, leaking nothing: a database that failed is reported as an
 * outage (Db/Failures.ts), a true bug logged with its stack.
 */
import { Cause, Effect } from "effect"
import { HttpMethod, type HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiError } from "effect/http-api"
import { reportDatabaseFailure } from "../Db/Failures.ts"
import { type ClientError, errorHeaders, errorStatus, InternalError, isClientError, MethodNotAllowed, RouteNotFound } from "../Errors.ts"
import { Unhealthy } from "../Observability/Api.ts"
import { textDepthExceeds, tooDeepMessage } from "../Domain/JsonDepth.ts"
import {
  allowedMethods,
  contentTypeInvalid,
  type EndpointShape,
  jsonInvalid,
  requestView,
  routedPath,
  toValidationIssues,
  type ValidationIssue
} from "./Validation.ts"

export const json = (status: number, body: unknown) => HttpServerResponse.jsonUnsafe(body, { status })

export const detail = (status: number, text: string) => json(status, { detail: text })

export const validationResponse = (issues: ReadonlyArray<ValidationIssue>) => json(422, { detail: issues })

const isJsonContentType = (contentType: string | undefined) =>
  contentType === undefined || contentType.toLowerCase().includes("application/json")

const FORM_TYPE = "application/x-www-form-urlencoded"

const isFormContentType = (contentType: string | undefined) =>
  contentType !== undefined && contentType.toLowerCase().split(";")[0]!.trim() === FORM_TYPE

/** A form body's fields as HttpApi decodes them: a repeated name holds every value. */
const formFields = (text: string): Record<string, string | Array<string>> => {
  const fields: Record<string, string | Array<string>> = {}
  for (const [name, value] of new URLSearchParams(text)) {
    const held = fields[name]
    fields[name] = held === undefined ? value : Array.isArray(held) ? [...held, value] : [held, value]
  }
  return fields
}

/** The body as JSON text, or "" when it is not a JSON body (or cannot be read); the audit stage records it. */
export const jsonText = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<string> =>
  HttpMethod.hasBody(request.method) && isJsonContentType(request.headers["content-type"])
    ? Effect.orElseSucceed(request.text, () => "")
    : Effect.succeed("")

export const parseJson = (text: string): { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly message: string } => {
  try {
    return { ok: true, value: JSON.parse(text) }
  } catch (error) {
    return { ok: false, message: error instanceof Error ? error.message : String(error) }
  }
}

/** A request URL without its query (which may carry anything a client sent). */
const pathOf = (url: string) => {
  const queryStart = url.indexOf("?")
  return queryStart === -1 ? url : url.slice(0, queryStart)
}

const errorOf = (cause: Cause.Cause<unknown>): unknown => {
  for (const reason of cause.reasons) {
    if (reason._tag === "Fail") return reason.error
    if (reason._tag === "Die") return reason.defect
  }
  return Cause.squash(cause)
}

/** A client error as its response: `{detail}` with the table's status and headers (Errors.ts `errorHeaders`). */
export const clientErrorResponse = (error: ClientError) =>
  HttpServerResponse.setHeaders(detail(errorStatus[error._tag].http, error.detail), errorHeaders(error))

export const makeErrorResponse = (shapes: ReadonlyArray<EndpointShape>) => {
  /**
   * Why the router found no route: a known path asked with a method its route does not serve is a
   * 405 (decided on the path alone: the body is never read); anything else — an unknown path, or
   * a parameter longer than the router takes — is a 404.
   */
  const notRouted = (request: HttpServerRequest.HttpServerRequest): ClientError => {
    const pathname = routedPath(pathOf(request.url))
    const allow = allowedMethods(shapes, pathname)
    return allow.length > 0 && !allow.includes(request.method) ? MethodNotAllowed.of(allow) : RouteNotFound.instance
  }


  /** Maps anything the app failed with to a response; only true bugs become a 500. */
  const fromCause = (request: HttpServerRequest.HttpServerRequest, cause: Cause.Cause<unknown>) =>
    Effect.gen(function*() {
      const error = errorOf(cause)
      const schemaError = HttpApiError.HttpApiSchemaError.is(error) ? error : undefined
      const decodeFailed = schemaError !== undefined && schemaError.kind !== "Body" && schemaError.kind !== "ResponseHeaders"
      if (decodeFailed || Cause.hasDies(cause)) {
        const text = yield* jsonText(request)
        // Checked before the issues are rendered: such a value is refused, never echoed.
        if (textDepthExceeds(text)) {
          return validationResponse([{ type: "value_error", loc: ["body"], msg: tooDeepMessage, input: null }])
        }
        if (decodeFailed) {
          let body: unknown = null
          // A form body reached decoding only where the endpoint takes one (POST /login).
          if (schemaError.kind === "Payload" && isFormContentType(request.headers["content-type"])) {
            body = formFields(yield* Effect.orElseSucceed(request.text, () => ""))
          } else if (schemaError.kind === "Payload") {
            const parsed = parseJson(text)
            if (!parsed.ok) return validationResponse(jsonInvalid(parsed.message))
            body = parsed.value
          }
          return validationResponse(toValidationIssues(shapes, schemaError, requestView(request, body)))
        }
      }
      // docs/operations.md#health-and-probes: 503 with the health report's own shape, not `{detail}`.
      if (error instanceof Unhealthy) return json(503, error.report)
      if (isClientError(error)) return clientErrorResponse(error)
      if (typeof error === "object" && error !== null && "_tag" in error && error._tag === "HttpServerError" && "reason" in error) {
        const reason = error.reason as { readonly _tag: string; readonly cause?: unknown }
        if (reason._tag === "RouteNotFound") return clientErrorResponse(notRouted(request))
        // The upload broke off or was not readable as text.
        if (reason._tag === "RequestParseError") {
          return validationResponse(jsonInvalid(reason.cause instanceof Error ? reason.cause.message : "Invalid JSON"))
        }
      }
      // docs/operations.md#outages: the database failing is an outage, logged when it begins and
      // ends; only a bug is an ERROR line with its stack.
      yield* reportDatabaseFailure(error, `${request.method} ${pathOf(request.url)}`, Effect.logError("Unhandled error", cause))
      return detail(500, InternalError.instance.detail)
    })

  /**
   * HttpApi answers a body in a content type the endpoint does not take with its own 415; every
   * request body is JSON (docs/http-api.md#conventions), so that is the 422 FastAPI gives for a wrong content type.
   */
  const fromResponse = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
    response.status === 415
      ? validationResponse(contentTypeInvalid(request.headers["content-type"] ?? ""))
      : response

  return { fromCause, fromResponse } as const
}
