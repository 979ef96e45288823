/**
 * Front door: the audit record of an authenticated HTTP request (docs/audit.md#what-is-recorded), written after the
 * response is known. Not recorded: the unlimited paths (probes, scrapes, docs) and the login
 * endpoints, whose handlers write their own record (a login is not a bearer-authenticated request).
 */
import { Effect } from "effect"
import type { HttpServerRequest, HttpServerResponse } from "effect/http"
import type { AuditLog } from "../AuditLogs/AuditLog.ts"
import { captureRequestData } from "../AuditLogs/RequestData.ts"
import { isSecretKey, redact } from "../Domain/Secrets.ts"
import { requestEntry } from "../AuditLogs/Entries.ts"
import type { RequestContext } from "../Domain/RequestContext.ts"
import { jsonText, parseJson } from "./ErrorResponse.ts"

/** Paths whose handlers write their own audit record. */
const SELF_AUDITED_PATHS: ReadonlySet<string> = new Set(["/login", "/login/refresh"])

const decoder = new TextDecoder()

const ERROR_MESSAGE_MAX_CHARS = 1000

/**
 * A 422 issue as the audit stores it (docs/audit.md#what-is-recorded): the response echoes the client's own input
 * back to it, but the stored record obeys the redaction of `request_data` — the input of a
 * parameter named like a secret is `[REDACTED]`, secrets nested in an echoed object are too, and
 * a JSON parse error keeps no excerpt of the text that did not parse (V8 quotes it).
 */
const auditedIssue = (issue: unknown): unknown => {
  if (typeof issue !== "object" || issue === null || Array.isArray(issue)) return redact(issue)
  const { input, loc, msg, type, ...rest } = issue as Record<string, unknown>
  const namesSecret = Array.isArray(loc) && loc.some((part) => typeof part === "string" && isSecretKey(part))
  return {
    ...(redact(rest) as Record<string, unknown>),
    type,
    loc,
    msg: type === "json_invalid" ? "JSON decode error" : msg,
    input: namesSecret ? "[REDACTED]" : redact(input)
  }
}

/** The `detail` of a JSON error body, for the audit record; a 422's issues with secrets redacted. */
const errorMessageOf = (response: HttpServerResponse.HttpServerResponse): string | null => {
  const body = response.body
  if (body._tag !== "Uint8Array") return `HTTP ${response.status}`
  try {
    const parsed = JSON.parse(body.text ?? decoder.decode(body.body)) as { detail?: unknown }
    if (typeof parsed.detail === "string") return parsed.detail
    const detail = Array.isArray(parsed.detail) ? parsed.detail.map(auditedIssue) : redact(parsed.detail ?? null)
    return JSON.stringify(detail).slice(0, ERROR_MESSAGE_MAX_CHARS)
  } catch {
    return `HTTP ${response.status}`
  }
}

/** Only a JSON body is recorded (any other was refused with a 422). */
const bodyOf = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<unknown> =>
  Effect.map(jsonText(request), (text) => {
    if (text === "") return undefined
    const parsed = parseJson(text)
    return parsed.ok ? parsed.value : undefined
  })

/** What the record is made of besides the response (the front door's record of the request). */
export interface AuditedRequest {
  readonly request: HttpServerRequest.HttpServerRequest
  /** The request the app read its body from (Http/BodyLimit.ts may have read it first). */
  readonly presented: HttpServerRequest.HttpServerRequest
  readonly pathname: string
  readonly ctx: RequestContext
}

export const makeAuditStage = (audit: AuditLog["Service"], unaudited: ReadonlySet<string>) =>
(
  { ctx, pathname, presented, request }: AuditedRequest,
  response: HttpServerResponse.HttpServerResponse
): Effect.Effect<void> => {
  const user = ctx.user
  if (user === undefined || unaudited.has(pathname) || SELF_AUDITED_PATHS.has(pathname)) return Effect.void
  // A 405 was decided on the path alone: its body went to no handler and is not read for the record either.
  return Effect.flatMap(response.status === 405 ? Effect.undefined : bodyOf(presented), (body) => {
    const queryStart = request.url.indexOf("?")
    const query = queryStart === -1 ? undefined : Object.fromEntries(new URLSearchParams(request.url.slice(queryStart + 1)))
    const status = response.status
    return audit.record(requestEntry(ctx, user, {
      action_type: request.method,
      resource: pathname,
      response_status: status,
      request_data: captureRequestData(query, body),
      error_message: status >= 400 ? errorMessageOf(response) : null
    }))
  })
}
