/**
 * The audit entries of every transport (docs/audit.md#what-is-recorded), built in one place: a site says who did
 * what and how it ended; the constructor fills in where it came from (IP, user agent, correlation
 * id), the ids, the times and the outcome, the same way for HTTP, login and WebSocket.
 *
 * Times: `timestamp` is when the interaction started. An HTTP
 * request's `duration_ms` runs from its start (`RequestContext.startedAt`) to when its record is
 * built, once the response is known — the one definition the front door's audit stage and the
 * login handler share. A WebSocket message brings its own start and duration (the figure of
 * `ws_message_processing_duration_seconds`); a refused connection has no request: now and 0.
 */
import { randomUUID } from "node:crypto"
import { type AuditEntry, type AuditOutcome, outcomeOf } from "../AuditLogs/AuditLog.ts"
import type { User } from "../Domain/User.ts"
import { WsStatus } from "../Errors.ts"
import type { RequestContext } from "../Domain/RequestContext.ts"

/** Where an interaction came from: an HTTP request's facts and a WebSocket connection both have these. */
export interface Peer {
  readonly ip: string
  readonly userAgent: string
  readonly correlationId: string
}

/** What was done and how it ended, in the entry's own terms; the actor is a `User` (id, username, roles). */
export type Act = Pick<AuditEntry, "action_type" | "resource" | "response_status" | "request_data" | "error_message">

/** A processed WebSocket message: its `req_id`, start, duration and `status_code`. */
export interface MessageAct extends Act, Pick<AuditEntry, "request_id" | "timestamp" | "duration_ms"> {
  readonly status_code: WsStatus
}

/** Whole milliseconds from `startedAt` to `now`; never negative (the wall clock may be set back). */
export const durationSince = (startedAt: Date, now: number = Date.now()): number => Math.max(0, now - startedAt.getTime())

/** docs/audit.md#what-is-recorded: a WebSocket reply's outcome follows its status_code (3 → permission_denied), not its HTTP equivalent. */
export const wsOutcomeOf = (status: WsStatus): AuditOutcome =>
  status === WsStatus.OK ? "success" : status === WsStatus.PERMISSION_DENIED ? "permission_denied" : "error"

/** Every field, explicitly: nothing else a site's object carries (`status_code`) reaches the record. */
const entry = (
  peer: Peer,
  user: User,
  act: Act & Pick<AuditEntry, "request_id" | "timestamp" | "duration_ms" | "outcome">
): AuditEntry => ({
  timestamp: act.timestamp,
  user_id: user.id,
  username: user.username,
  user_roles: user.roles,
  action_type: act.action_type,
  resource: act.resource,
  outcome: act.outcome,
  ip_address: peer.ip,
  user_agent: peer.userAgent,
  request_id: act.request_id,
  correlation_id: peer.correlationId,
  response_status: act.response_status,
  duration_ms: act.duration_ms,
  request_data: act.request_data,
  error_message: act.error_message
})

/** An HTTP request's entry: its ids and client from `ctx`; outcome by status (403 → permission_denied, ≥ 400 → error). */
export const requestEntry = (ctx: RequestContext, user: User, act: Act, now: number = Date.now()): AuditEntry =>
  entry(ctx, user, {
    ...act,
    timestamp: ctx.startedAt,
    request_id: ctx.requestId,
    duration_ms: durationSince(ctx.startedAt, now),
    outcome: outcomeOf(act.response_status)
  })

/**
 * A login attempt's entry (outcome `success` or `error`, never `permission_denied`);
 * `user` is whom the issued token names, or the username as sent with an empty id.
 */
export const loginEntry = (ctx: RequestContext, user: User, act: Act, now: number = Date.now()): AuditEntry => {
  const request = requestEntry(ctx, user, act, now)
  return request.outcome === "permission_denied" ? { ...request, outcome: "error" } : request
}

/** A processed WebSocket message's entry: request_id = the envelope's req_id. */
export const messageEntry = (peer: Peer, user: User, act: MessageAct): AuditEntry =>
  entry(peer, user, { ...act, outcome: wsOutcomeOf(act.status_code) })

/**
 * A WebSocket connection refused to an authenticated user (`WS:CONNECT`): no request
 * of its own, so a fresh request_id, the time of the refusal and duration 0; outcome by status.
 */
export const connectionEntry = (peer: Peer, user: User, act: Act, now: Date = new Date()): AuditEntry =>
  entry(peer, user, {
    ...act,
    timestamp: now,
    request_id: randomUUID(),
    duration_ms: 0,
    outcome: outcomeOf(act.response_status)
  })
