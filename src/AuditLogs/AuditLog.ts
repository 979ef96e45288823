/**
 * The audit trail's write side (docs/audit.md#guarantees): `record` never waits for the database.
 */
import { Context, Effect, Layer } from "effect"
import { randomUUID } from "node:crypto"
import type { RequestData } from "./RequestData.ts"

export type AuditOutcome = "success" | "error" | "permission_denied"

export interface AuditEntry {
  readonly timestamp: Date
  readonly user_id: string
  readonly username: string
  readonly user_roles: ReadonlyArray<string>
  readonly action_type: string
  readonly resource: string
  readonly outcome: AuditOutcome
  readonly ip_address: string
  readonly user_agent: string
  readonly request_id: string
  readonly correlation_id: string
  readonly response_status: number
  readonly duration_ms: number
  /** Captured once as JSON text (RequestData.ts `captureRequestData`), or a small literal. */
  readonly request_data: RequestData
  readonly error_message: string | null
}

/** A record as buffered: the entry and the id that makes its insertion idempotent. */
export interface StoredEntry {
  readonly entryId: string
  readonly entry: AuditEntry
}

/** Values the database would refuse are reduced when the batch is inserted (Storable.ts), not on the request's path. */
export const newEntry = (entry: AuditEntry): StoredEntry => ({ entryId: randomUUID(), entry })

export class AuditLog extends Context.Service<AuditLog, {
  /** Buffers a record; returns at once. */
  readonly record: (entry: AuditEntry) => Effect.Effect<void>
}>()("AuditLogs/AuditLog") {
  /** AUDIT_LOG_ENABLED=false: records go nowhere. */
  static readonly none: Layer.Layer<AuditLog> = Layer.succeed(AuditLog, AuditLog.of({ record: () => Effect.void }))
}

/** docs/audit.md#what-is-recorded: 403 → permission_denied, other status ≥ 400 → error. */
export const outcomeOf = (status: number): AuditOutcome =>
  status === 403 ? "permission_denied" : status >= 400 ? "error" : "success"
