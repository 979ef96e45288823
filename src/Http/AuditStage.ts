/**
 * Front door: the audit record of an authenticated HTTP request (CONTRACT §6), written after the
 * response is known. Not recorded: the unlimited paths (probes, scrapes, docs) and the login
 * endpoints, whose handlers write their own record (a login is not a bearer-authenticated request).
 */
import { Effect } from "effect"
import { HttpMethod, type HttpServerRequest, type HttpServerResponse } from "effect/http"
import { AuditLog, outcomeOf } from "../AuditLogs/AuditLog.ts"
import { captureRequestData } from "../AuditLogs/RequestData.ts"
import type { RequestContext } from "../Edge/RequestContext.ts"

/** Paths whose handlers write their own audit record. */
const SELF_AUDITED_PATHS: ReadonlySet<string> = new Set(["/login", "/login/refresh"])

const decoder = new TextDecoder()

/** The `detail` of a JSON error body, for the audit record. */
const errorMessageOf = (response: HttpServerResponse.HttpServerResponse): string | null => {
  const body = response.body
  if (body._tag !== "Uint8Array") return `HTTP ${response.status}`
  try {
    const parsed = JSON.parse(body.text ?? decoder.decode(body.body)) as { detail?: unknown }
    return typeof parsed.detail === "string" ? parsed.detail : JSON.stringify(parsed.detail ?? null).slice(0, 1000)
  } catch {
    return `HTTP ${response.status}`
  }
}

const isJsonBody = (request: HttpServerRequest.HttpServerRequest) => {
  const contentType = request.headers["content-type"]
  return contentType === undefined || contentType.toLowerCase().includes("application/json")
}

/** Only a JSON body is recorded (any other was refused with a 422). */
const bodyOf = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<unknown> =>
  HttpMethod.hasBody(request.method) && isJsonBody(request)
    ? Effect.map(Effect.orElseSucceed(request.text, () => ""), (text) => {
      try {
        return text === "" ? undefined : JSON.parse(text) as unknown
      } catch {
        return undefined
      }
    })
    : Effect.succeed(undefined)

export const makeAuditStage = (audit: AuditLog["Service"], unaudited: ReadonlySet<string>) =>
(
  request: HttpServerRequest.HttpServerRequest,
  /** The request the app read its body from (Http/BodyLimit.ts may have read it first). */
  bodySource: HttpServerRequest.HttpServerRequest,
  pathname: string,
  ctx: RequestContext,
  response: HttpServerResponse.HttpServerResponse,
  durationMs: number
): Effect.Effect<void> => {
  const user = ctx.user
  if (user === undefined || unaudited.has(pathname) || SELF_AUDITED_PATHS.has(pathname)) return Effect.void
  return Effect.flatMap(bodyOf(bodySource), (body) => {
    const queryStart = request.url.indexOf("?")
    const query = queryStart === -1 ? undefined : Object.fromEntries(new URLSearchParams(request.url.slice(queryStart + 1)))
    const status = response.status
    return audit.record({
      timestamp: ctx.startedAt,
      user_id: user.id,
      username: user.username,
      user_roles: user.roles,
      action_type: request.method,
      resource: pathname,
      outcome: outcomeOf(status),
      ip_address: ctx.ip,
      user_agent: ctx.userAgent,
      request_id: ctx.requestId,
      correlation_id: ctx.correlationId,
      response_status: status,
      duration_ms: durationMs,
      request_data: captureRequestData(query, body),
      error_message: status >= 400 ? errorMessageOf(response) : null
    })
  })
}
