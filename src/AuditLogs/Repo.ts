/**
 * Audit trail SQL: the writer's batch insert (one parameterised INSERT of `unnest`ed column arrays,
 * idempotent on the internal `entry_id`) and the admin queries (docs/audit.md#reading-it: exact filters, inclusive date
 * range, newest first, each served by one index of migrations/0003_audit_logs.sql).
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import { Array as Arr, Context, Effect, Layer, Result } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import type { AuditOutcome, StoredEntry } from "./Entry.ts"
import { toColumns } from "./Storable.ts"

export interface AuditFilters {
  readonly user_id?: string | undefined
  readonly username?: string | undefined
  readonly action_type?: string | undefined
  readonly resource?: string | undefined
  readonly outcome?: string | undefined
  /** Inclusive bounds. */
  readonly from?: Date | undefined
  readonly to?: Date | undefined
}

export interface AuditListRow {
  readonly id: number
  readonly timestamp: string
  readonly user_id: string
  readonly username: string
  readonly action_type: string
  readonly resource: string
  readonly outcome: AuditOutcome
  readonly ip_address: string
  readonly request_id: string
  readonly response_status: number
  readonly duration_ms: number
}

export interface AuditDetailRow extends AuditListRow {
  readonly user_roles: ReadonlyArray<string>
  readonly user_agent: string
  readonly request_data: Record<string, unknown>
  readonly error_message: string | null
  readonly correlation_id: string
}

const HOUR = 3_600_000

/** Rows per INSERT (and per stream pipeline, per stream page). */
export const INSERT_BATCH_MAX = 500

/** A column as one typed array parameter (binary format): the same types whatever the values, nulls included. */
const arrayParameter = (oid: number) => (values: ReadonlyArray<unknown>) => Result.getOrThrow(PgTypes.array(values, oid))
const texts = arrayParameter(PgTypes.OID.text)
const times = arrayParameter(PgTypes.OID.timestamptz)
const ints = arrayParameter(PgTypes.OID.int4)

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const timestamp = sql`to_char("timestamp" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS "timestamp"`
  const listColumns = sql`id::int AS id, ${timestamp}, user_id, username, action_type, resource, outcome, ip_address,
      request_id, response_status, duration_ms`

  /**
   * Inserts a batch (reduced to what the database takes: Storable.ts); rows already stored (same
   * entry id) are skipped. Fails with SqlError. One statement for every batch size: the rows travel
   * as 16 array parameters (one per column, typed, so the same prepared statement fits them all)
   * that `unnest` zips back into rows, in the order of the batch. A value a column refuses (a
   * malformed entry id, JSON) fails the statement with the server's SQLSTATE, as a VALUES row would.
   */
  const insertBatch = (batch: ReadonlyArray<StoredEntry>) =>
    !Arr.isReadonlyArrayNonEmpty(batch) ? Effect.void : Effect.suspend(() => {
      const c = toColumns(batch)
      return sql`INSERT INTO audit_logs (entry_id, "timestamp", user_id, username, user_roles, action_type, resource,
        outcome, ip_address, user_agent, request_id, correlation_id, response_status, duration_ms, request_data, error_message)
        SELECT e::uuid, t, ui, un, ur::jsonb, a, r, o, ip, ua, ri, ci, rs, d, rd::jsonb, em FROM unnest(${texts(c.entry_id)},
        ${times(c.timestamp)}, ${texts(c.user_id)}, ${texts(c.username)}, ${texts(c.user_roles)}, ${texts(c.action_type)},
        ${texts(c.resource)}, ${texts(c.outcome)}, ${texts(c.ip_address)}, ${texts(c.user_agent)}, ${texts(c.request_id)},
        ${texts(c.correlation_id)}, ${ints(c.response_status)}, ${ints(c.duration_ms)}, ${texts(c.request_data)},
        ${texts(c.error_message)}) AS x(e, t, ui, un, ur, a, r, o, ip, ua, ri, ci, rs, d, rd, em)
        ON CONFLICT (entry_id) DO NOTHING`
    }).pipe(
      Effect.asVoid,
      Effect.withSpan("AuditRepo.insertBatch", { attributes: { rows: batch.length } }, { captureStackTrace: false })
    )

  const where = (f: AuditFilters) => {
    const clauses: Array<Statement.Fragment> = []
    if (f.user_id !== undefined) clauses.push(sql`user_id = ${f.user_id}`)
    if (f.username !== undefined) clauses.push(sql`username = ${f.username}`)
    if (f.action_type !== undefined) clauses.push(sql`action_type = ${f.action_type}`)
    if (f.resource !== undefined) clauses.push(sql`resource = ${f.resource}`)
    if (f.outcome !== undefined) clauses.push(sql`outcome = ${f.outcome}`)
    if (f.from !== undefined) clauses.push(sql`"timestamp" >= ${f.from}`)
    if (f.to !== undefined) clauses.push(sql`"timestamp" <= ${f.to}`)
    return clauses.length === 0 ? sql`` : sql`WHERE ${sql.and(clauses)}`
  }

  /**
   * The exact total. `user_id`, `username` and `resource` are selective: their index counts
   * fast. Without them (no filter, `action_type`, `outcome`, a date range) a count could scan
   * most of the table, so whole hours come from the `audit_log_hourly` rollup and only the
   * partial hours at the ends of the range are counted in `audit_logs`.
   */
  const total = (f: AuditFilters) => {
    if (f.user_id !== undefined || f.username !== undefined || f.resource !== undefined) {
      return sql<{ total: number }>`SELECT count(*)::int AS total FROM audit_logs ${where(f)}`
    }
    const firstHour = f.from === undefined ? undefined : new Date(Math.ceil(f.from.getTime() / HOUR) * HOUR)
    const endHour = f.to === undefined ? undefined : new Date(Math.floor(f.to.getTime() / HOUR) * HOUR)
    if (firstHour !== undefined && endHour !== undefined && firstHour >= endHour) {
      return sql<{ total: number }>`SELECT count(*)::int AS total FROM audit_logs ${where(f)}`
    }
    const rollup: Array<Statement.Fragment> = []
    if (f.action_type !== undefined) rollup.push(sql`action_type = ${f.action_type}`)
    if (f.outcome !== undefined) rollup.push(sql`outcome = ${f.outcome}`)
    if (firstHour !== undefined) rollup.push(sql`hour >= ${firstHour}`)
    if (endHour !== undefined) rollup.push(sql`hour < ${endHour}`)
    const head = firstHour === undefined
      ? sql`0`
      : sql`(SELECT count(*) FROM audit_logs ${where({ ...f, to: undefined })} AND "timestamp" < ${firstHour})`
    const tail = endHour === undefined
      ? sql`0`
      : sql`(SELECT count(*) FROM audit_logs ${where({ ...f, from: undefined })} AND "timestamp" >= ${endHour})`
    return sql<{ total: number }>`SELECT ((SELECT coalesce(sum(n), 0) FROM audit_log_hourly ${
        rollup.length === 0 ? sql`` : sql`WHERE ${sql.and(rollup)}`
      }) + ${head} + ${tail})::int AS total`
  }

  // Qualified: a bare "timestamp" in ORDER BY would name the formatted output column (text,
  // no index) rather than the table's.
  const pageRows = (filters: AuditFilters, pageNumber: number, perPage: number) =>
    sql<AuditListRow>`SELECT ${listColumns} FROM audit_logs ${where(filters)}
        ORDER BY audit_logs."timestamp" DESC, audit_logs.id DESC LIMIT ${perPage} OFFSET ${(pageNumber - 1) * perPage}`

  const page = (filters: AuditFilters, pageNumber: number, perPage: number) =>
    Effect.all([pageRows(filters, pageNumber, perPage), total(filters)], { concurrency: 2 }).pipe(
      Effect.map(([items, totals]) => ({ items, total: totals[0]?.total ?? 0 })),
      Effect.orDie,
      // A stack trace per call costs an Error even with tracing off.
      Effect.withSpan("AuditRepo.page", undefined, { captureStackTrace: false })
    )

  const findById = (id: number) =>
    sql<AuditDetailRow>`SELECT ${listColumns}, user_roles, user_agent, request_data, error_message, correlation_id
        FROM audit_logs WHERE id = ${id}`.pipe(
      Effect.map((rows) => rows[0]),
      Effect.orDie,
      Effect.withSpan("AuditRepo.findById", undefined, { captureStackTrace: false })
    )

  /** The statements behind `page`, for bench/audit-explain.ts to EXPLAIN exactly what runs. */
  const statements = { pageRows, total }

  return { insertBatch, page, findById, statements } as const
})

export class AuditRepo extends Context.Service<AuditRepo>()("AuditLogs/Repo", { make }) {
  static readonly layer = Layer.effect(AuditRepo, make)
}
