/**
 * Waits until the audit record of one request is stored: polls `GET /audit-logs` as admin (newest
 * first) until an item carries the request's id (`X-Request-ID` of an HTTP response, the envelope
 * `req_id` of a WebSocket message). Proves the trail is still advancing after whatever came before.
 */
import { expect } from "vitest"
import { eventually } from "./Eventually.ts"
import { request, type TestApp } from "./TestApp.ts"

export interface AuditItem {
  readonly id: number
  readonly request_id: string
  readonly user_id: string
  readonly username: string
  readonly action_type: string
  readonly resource: string
  readonly outcome: string
  readonly response_status: number
}

/** `filter` narrows the listing (e.g. `&user_id=probe`), so the record is on the first page however busy the trail was. */
export const awaitAuditRecord = async (
  app: Pick<TestApp, "url">,
  adminToken: string,
  requestId: string,
  filter = ""
): Promise<AuditItem> => {
  let found: AuditItem | undefined
  await eventually(async () => {
    const res = await request(app, "GET", `/audit-logs?per_page=100${filter}`, { token: adminToken })
    expect(res.status, "GET /audit-logs as admin").toBe(200)
    found = (res.body as { items: Array<AuditItem> }).items.find((i) => i.request_id === requestId)
    return found !== undefined
  }, `the audit record of ${requestId}`)
  return found!
}

export interface AuditDetail extends AuditItem {
  readonly error_message: string | null
  readonly request_data: Record<string, unknown>
}

/**
 * Waits until `GET /audit-logs<filter>` lists a record (for records with no request id the test
 * knows, e.g. a refused WebSocket connection: filter by a unique `user_id`), and returns its detail
 * (`GET /audit-logs/{id}`, which adds `error_message`, `request_data`, …).
 */
export const awaitAuditDetail = async (
  app: Pick<TestApp, "url">,
  adminToken: string,
  filter: string,
  what: string
): Promise<AuditDetail> => {
  let found: AuditItem | undefined
  await eventually(async () => {
    const res = await request(app, "GET", `/audit-logs?per_page=100${filter}`, { token: adminToken })
    expect(res.status, "GET /audit-logs as admin").toBe(200)
    found = (res.body as { items: Array<AuditItem> }).items[0]
    return found !== undefined
  }, what)
  const detail = await request(app, "GET", `/audit-logs/${found!.id}`, { token: adminToken })
  expect(detail.status, `GET /audit-logs/${found!.id} as admin`).toBe(200)
  return detail.body as AuditDetail
}
