/** Audit records the writers had to give up on: counted (`audit_records_dropped_total`) and logged. */
import { Effect } from "effect"
import { type AuditDropReason, auditRecordsDroppedTotal } from "../Observability/Metrics.ts"

const dropMessages: Record<AuditDropReason, string> = {
  buffer_full: "Audit records dropped: buffer full",
  stream_full: "Audit records dropped: audit stream backlog full",
  shutdown: "Audit records dropped: database unreachable at shutdown",
  refused: "Audit record dropped: the database refused it even reduced",
  unreadable: "Audit records dropped: a journal entry that cannot be read"
}

/** Counts `n` records given up for `reason` and logs it once (with `error` and `details`: which entry, …). */
export const countDropped = (n: number, reason: AuditDropReason, error?: unknown, details: Record<string, unknown> = {}) =>
  n === 0 ? Effect.void : Effect.andThen(
    Effect.sync(() => auditRecordsDroppedTotal.inc({ reason }, n)),
    Effect.logError(dropMessages[reason], ...(error === undefined ? [] : [error])).pipe(Effect.annotateLogs({ ...details, dropped: n, reason }))
  )
