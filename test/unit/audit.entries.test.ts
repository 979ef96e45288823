/**
 * The audit-entry constructors (AuditLogs/Entries.ts) every transport uses (docs/audit.md#what-is-recorded):
 * each fills the same fields from what its site knows — an HTTP request's facts, a login's
 * subject, a WebSocket connection and message — and nothing else reaches the record.
 */
import { describe, expect, it } from "vitest"
import type { AuditEntry } from "../../src/AuditLogs/Entry.ts"
import type { Principal, User } from "../../src/Domain/User.ts"
import {
  type Act,
  connectionEntry,
  durationSince,
  loginEntry,
  messageEntry,
  type Peer,
  requestEntry
} from "../../src/AuditLogs/Entries.ts"
import type { RequestContext } from "../../src/Domain/RequestContext.ts"
import { WsStatus } from "../../src/Errors.ts"

const FIELDS = [
  "action_type", "correlation_id", "duration_ms", "error_message", "ip_address", "outcome", "request_data",
  "request_id", "resource", "response_status", "timestamp", "user_agent", "user_id", "user_roles", "username"
]
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

const startedAt = new Date("2026-01-02T03:04:05.678Z")
const principal: Principal = { id: "u-1", username: "alice", roles: ["get-authors", "admin"], expiresAt: 2_000_000_000 }
const ctx: RequestContext = {
  requestId: "6f1c2a7e-0d4b-4c1e-9a55-2b0f7c3d9e10",
  correlationId: "corr-1",
  traceId: "6f1c2a7e0d4b4c1e9a552b0f7c3d9e10",
  startedAt,
  ip: "192.0.2.7",
  userAgent: "agent/1.0",
  auth: undefined,
  user: principal
}
const act = (response_status: number, error_message: string | null = null): Act => ({
  action_type: "GET",
  resource: "/authors",
  response_status,
  request_data: { query: { page: "1" } },
  error_message
})

describe("audit entries", () => {
  it("an HTTP request's: who from the principal, where and ids from the request's facts, timestamp = its start", () => {
    const entry = requestEntry(ctx, principal, act(200), startedAt.getTime() + 42)
    expect(entry).toStrictEqual({
      timestamp: startedAt,
      user_id: "u-1",
      username: "alice",
      user_roles: ["get-authors", "admin"],
      action_type: "GET",
      resource: "/authors",
      outcome: "success",
      ip_address: "192.0.2.7",
      user_agent: "agent/1.0",
      request_id: ctx.requestId,
      correlation_id: "corr-1",
      response_status: 200,
      duration_ms: 42,
      request_data: { query: { page: "1" } },
      error_message: null
    } satisfies AuditEntry)
    // Principal's expiresAt is not an audit field.
    expect(Object.keys(entry).sort()).toEqual(FIELDS)
  })

  it("an HTTP request's outcome by status: 403 → permission_denied, other ≥ 400 → error", () => {
    const outcome = (status: number) => requestEntry(ctx, principal, act(status)).outcome
    expect([200, 201, 204, 399].map(outcome)).toEqual(["success", "success", "success", "success"])
    expect(outcome(403)).toBe("permission_denied")
    expect([400, 401, 404, 409, 422, 429, 500, 503].map(outcome)).toEqual(Array(8).fill("error"))
    expect(requestEntry(ctx, principal, act(404, "Author with ID 7 not found")).error_message).toBe("Author with ID 7 not found")
  })

  it("duration: whole milliseconds from the start, never negative; by default until now", () => {
    expect(durationSince(startedAt, startedAt.getTime() + 1500)).toBe(1500)
    expect(durationSince(startedAt, startedAt.getTime() - 5)).toBe(0)
    const recent = new Date(Date.now() - 20)
    const measured = requestEntry({ ...ctx, startedAt: recent }, principal, act(200)).duration_ms
    expect(measured).toBeGreaterThanOrEqual(20)
    expect(measured).toBeLessThan(10_000)
  })

  it("a login attempt's: who is the subject given (not the request's principal); outcome success or error only", () => {
    const failed: User = { id: "", username: "bob as sent", roles: [] }
    const loginAct: Act = {
      action_type: "POST",
      resource: "/login",
      response_status: 401,
      request_data: { body: { username: "bob as sent", password: "[REDACTED]" } },
      error_message: "Invalid credentials"
    }
    expect(loginEntry(ctx, failed, loginAct, startedAt.getTime() + 7)).toStrictEqual({
      timestamp: startedAt,
      user_id: "",
      username: "bob as sent",
      user_roles: [],
      action_type: "POST",
      resource: "/login",
      outcome: "error",
      ip_address: "192.0.2.7",
      user_agent: "agent/1.0",
      request_id: ctx.requestId,
      correlation_id: "corr-1",
      response_status: 401,
      duration_ms: 7,
      request_data: { body: { username: "bob as sent", password: "[REDACTED]" } },
      error_message: "Invalid credentials"
    } satisfies AuditEntry)
    const outcome = (status: number) => loginEntry(ctx, failed, { ...loginAct, response_status: status }).outcome
    expect([200, 403, 429, 500, 503].map(outcome)).toEqual(["success", "error", "error", "error", "error"])
  })

  const conn: Peer & { readonly format: string; readonly id: string } = {
    id: "conn-1",
    format: "json",
    ip: "198.51.100.4",
    userAgent: "ws-client/2",
    correlationId: "ws-corr"
  }

  it("a WebSocket message's: request_id = req_id, its own start and duration; outcome by status_code", () => {
    const at = new Date("2026-01-02T03:04:06.000Z")
    const entry = messageEntry(conn, principal, {
      timestamp: at,
      request_id: "2b0f7c3d-9e10-4c1e-9a55-6f1c2a7e0d4b",
      duration_ms: 3,
      action_type: "WS:GET_AUTHORS",
      resource: "ws:/web",
      status_code: WsStatus.OK,
      response_status: 200,
      request_data: { body: { filters: {} } },
      error_message: null
    })
    expect(entry).toStrictEqual({
      timestamp: at,
      user_id: "u-1",
      username: "alice",
      user_roles: ["get-authors", "admin"],
      action_type: "WS:GET_AUTHORS",
      resource: "ws:/web",
      outcome: "success",
      ip_address: "198.51.100.4",
      user_agent: "ws-client/2",
      request_id: "2b0f7c3d-9e10-4c1e-9a55-6f1c2a7e0d4b",
      correlation_id: "ws-corr",
      response_status: 200,
      duration_ms: 3,
      request_data: { body: { filters: {} } },
      error_message: null
    } satisfies AuditEntry)
    // status_code stays out of the record; the connection's other fields too.
    expect(Object.keys(entry).sort()).toEqual(FIELDS)

    const outcome = (status_code: WsStatus, response_status: number) =>
      messageEntry(conn, principal, { ...entry, status_code, response_status }).outcome
    // docs/audit.md#what-is-recorded: status_code 3 → permission_denied, whatever its HTTP equivalent (an Unauthenticated is 401).
    expect(outcome(WsStatus.PERMISSION_DENIED, 403)).toBe("permission_denied")
    expect(outcome(WsStatus.PERMISSION_DENIED, 401)).toBe("permission_denied")
    expect(outcome(WsStatus.ERROR, 429)).toBe("error")
    expect(outcome(WsStatus.ERROR, 500)).toBe("error")
    expect(outcome(WsStatus.INVALID_DATA, 404)).toBe("error")
  })

  it("a refused WebSocket connection's: a fresh request_id, the time of the refusal, duration 0; outcome by status", () => {
    const refusal = (status: number, reason: string, now?: Date) =>
      connectionEntry(conn, principal, {
        action_type: "WS:CONNECT",
        resource: "ws:/web",
        response_status: status,
        request_data: { query: { format: conn.format } },
        error_message: reason
      }, now)
    const at = new Date("2026-01-02T03:04:07.000Z")
    const entry = refusal(403, "Origin not allowed", at)
    expect(entry).toStrictEqual({
      timestamp: at,
      user_id: "u-1",
      username: "alice",
      user_roles: ["get-authors", "admin"],
      action_type: "WS:CONNECT",
      resource: "ws:/web",
      outcome: "permission_denied",
      ip_address: "198.51.100.4",
      user_agent: "ws-client/2",
      request_id: expect.stringMatching(UUID),
      correlation_id: "ws-corr",
      response_status: 403,
      duration_ms: 0,
      request_data: { query: { format: "json" } },
      error_message: "Origin not allowed"
    })
    expect(Object.keys(entry).sort()).toEqual(FIELDS)
    const limited = refusal(429, "Maximum concurrent connections exceeded")
    expect(limited.outcome).toBe("error")
    expect(limited.request_id).not.toBe(entry.request_id)
    expect(Math.abs(limited.timestamp.getTime() - Date.now())).toBeLessThan(10_000)
  })
})
