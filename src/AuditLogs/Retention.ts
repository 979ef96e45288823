/**
 * Audit retention (docs/audit.md#retention): with AUDIT_RETENTION_DAYS > 0, records whose
 * `timestamp` is older than that many days are deleted, soon after start and then on a schedule,
 * by a scoped fiber of this Layer.
 *
 * - **Bounded batches.** Each batch is one `DELETE` of at most `batchSize` of the oldest records
 *   (the `timestamp` index, oldest first), one statement and so its own short transaction: a
 *   query sees all of a batch gone or none of it, and no lock is held for longer than a batch.
 *   Batches are paced (a pause of `pace` times what the last one took), so that pruning a backlog
 *   takes a bounded share of the database from the requests.
 *   The statement triggers of migrations/0003_audit_logs.sql take the batch's counts off the
 *   hourly rollup in the same transaction, so every total `GET /audit-logs` reports stays exact.
 * - **One instance at a time.** Every statement first takes a PostgreSQL advisory lock with
 *   `pg_try_advisory_xact_lock`; an instance that finds it taken ends its run (another one is
 *   pruning) and tries again at its next run. The lock goes with the statement's transaction: a
 *   crashed instance leaves none behind.
 * - **The rollup does not grow either.** Once the old records are gone, the rollup's rows of the
 *   hours before the cutoff are folded, in batches too: a group's rows (one per writer shard, and
 *   the deletions' negative counts) become one row, or none when they add up to 0.
 * - Every statement has the service's statement deadline (DATABASE_STATEMENT_TIMEOUT_SECONDS,
 *   Db/Instrumentation.ts); what is deleted is counted in `audit_records_pruned_total` as each batch
 *   commits, and a run that deleted something logs one INFO line.
 */
import { Cause, Context, Duration, Effect, Layer } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import type * as SqlError from "effect/sql/SqlError"
import { AppConfig } from "../Config.ts"
import { reportDatabaseFailure } from "../Db/Failures.ts"
import { auditRecordsPrunedTotal } from "../Observability/Metrics.ts"

/** An arbitrary, fixed key (the migrations use 727_172_001): every instance contends for the same lock. */
export const RETENTION_LOCK_KEY = 727_172_002

export interface RetentionSchedule {
  /** Records deleted per statement (and transaction). */
  readonly batchSize: number
  /** Rollup groups (hour, action, outcome) folded per statement. */
  readonly rollupBatchSize: number
  /**
   * After a full batch, the pause before the next one, as a multiple of the time the batch took:
   * 4 keeps the pruning's statement under a fifth of a backend's time, so the requests served
   * meanwhile keep their share of a busy database (docs/performance.md#audit-retention).
   */
  readonly pace: number
  /** From the start to the first run: the service is up and its journal recovered first. */
  readonly firstRunAfter: Duration.Input
  /** From the end of one run to the start of the next. */
  readonly every: Duration.Input
}

export const defaultRetentionSchedule: RetentionSchedule = {
  batchSize: 2_000,
  rollupBatchSize: 1_000,
  pace: 4,
  firstRunAfter: "30 seconds",
  every: "5 minutes"
}

/** The schedule of the pruning fiber; tests replace it (a run at once, a short pause, small batches). */
export const RetentionScheduleRef = Context.Reference<RetentionSchedule>("AuditLogs/RetentionSchedule", {
  defaultValue: () => defaultRetentionSchedule
})

/** What one run did: records deleted, batches committed, and whether it ended because another instance held the lock. */
export interface PruneRun {
  readonly deleted: number
  readonly batches: number
  readonly busy: boolean
}

/**
 * The statements of a run, over `days` (>= 1) and the schedule's batch sizes. Each is one statement,
 * so one transaction of its own that takes the lock first: no explicit transaction (pglite-socket's
 * connections share one session, where a transaction would hold up, and garble, the statements of
 * the others).
 */
const makePruner = (sql: SqlClient.SqlClient, days: number, schedule: RetentionSchedule) => {
  // The cutoff is the database's clock (`now()`: the statement's start), the same for every instance.
  const cutoff = sql`now() - make_interval(days => ${days})`
  // The rollup's hours are UTC hours (migrations/0003_audit_logs.sql): the hour the cutoff falls in.
  const cutoffHour = sql`date_trunc('hour', (${cutoff}) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`
  const lock = sql`lock AS (SELECT pg_try_advisory_xact_lock(${RETENTION_LOCK_KEY}) AS held)`

  /**
   * Deletes one batch of the oldest expired records (by ctid: the rows the index scan found, without a
   * second lookup); undefined when another instance holds the lock.
   */
  const deleteBatch: Effect.Effect<number | undefined, SqlError.SqlError> = Effect.map(
    sql<{ held: boolean; n: number }>`WITH ${lock},
      gone AS (
        DELETE FROM audit_logs WHERE (SELECT held FROM lock) AND ctid = ANY(ARRAY(
          SELECT ctid FROM audit_logs WHERE "timestamp" < ${cutoff} ORDER BY "timestamp", id LIMIT ${schedule.batchSize}))
        RETURNING 1)
      SELECT (SELECT held FROM lock) AS held, (SELECT count(*) FROM gone)::int AS n`,
    (rows) => rows[0]?.held === true ? rows[0].n : undefined
  )

  /**
   * Folds one batch of the rollup's groups (hour, action, outcome) before the cutoff's hour into one
   * row each, or none when they add up to 0; undefined when the lock is taken. The rows deleted are
   * the ones added back up (a count a writer added meanwhile is in the sum it deleted: READ COMMITTED
   * deletes the row's newest version and returns it), so every sum stays what it was. A group that
   * is already one row with a count is left as it is, so the batches come to an end.
   */
  const foldRollup: Effect.Effect<number | undefined, SqlError.SqlError> = Effect.map(
    sql<{ held: boolean; n: number }>`WITH ${lock},
      groups AS (
        SELECT hour, action_type, outcome FROM audit_log_hourly WHERE (SELECT held FROM lock) AND hour < ${cutoffHour}
        GROUP BY 1, 2, 3 HAVING count(*) > 1 OR sum(n) = 0 ORDER BY 1, 2, 3 LIMIT ${schedule.rollupBatchSize}),
      gone AS (
        DELETE FROM audit_log_hourly h USING groups g
        WHERE h.hour = g.hour AND h.action_type = g.action_type AND h.outcome = g.outcome
        RETURNING h.hour, h.action_type, h.outcome, h.n),
      folded AS (
        INSERT INTO audit_log_hourly (hour, action_type, outcome, shard, n)
        SELECT hour, action_type, outcome, 0, sum(n) FROM gone GROUP BY 1, 2, 3 HAVING sum(n) <> 0 ORDER BY 1, 2, 3
        ON CONFLICT (hour, action_type, outcome, shard) DO UPDATE SET n = audit_log_hourly.n + EXCLUDED.n)
      SELECT (SELECT held FROM lock) AS held, (SELECT count(*) FROM groups)::int AS n`,
    (rows) => rows[0]?.held === true ? rows[0].n : undefined
  )

  const paced = (took: Duration.Duration) => schedule.pace > 0 ? Effect.sleep(Duration.times(took, schedule.pace)) : Effect.void

  /**
   * Batches, each after a pause `pace` times as long as the one before took, until one finds fewer
   * than a full batch (or the lock taken); then the rollup likewise.
   */
  const run: Effect.Effect<PruneRun, SqlError.SqlError> = Effect.gen(function*() {
    let deleted = 0
    let batches = 0
    for (;;) {
      const [took, n] = yield* Effect.timed(deleteBatch)
      if (n === undefined) return { deleted, batches, busy: true }
      auditRecordsPrunedTotal.inc(n)
      deleted += n
      if (n > 0) batches++
      if (n < schedule.batchSize) break
      yield* paced(took)
    }
    for (;;) {
      const [took, groups] = yield* Effect.timed(foldRollup)
      if (groups === undefined) return { deleted, batches, busy: true }
      if (groups < schedule.rollupBatchSize) return { deleted, batches, busy: false }
      yield* paced(took)
    }
  })

  return { run }
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const config = yield* AppConfig
  const schedule = yield* RetentionScheduleRef
  const days = config.auditRetentionDays
  // 0 means keep forever (App.ts then leaves this Layer out): never a cutoff of now.
  if (!(days >= 1)) return yield* Effect.die(new Error(`AuditRetention needs AUDIT_RETENTION_DAYS >= 1, got ${days}`))
  const pruner = makePruner(sql, days, schedule)
  const every = Duration.fromInputUnsafe(schedule.every)
  const next = `next run in ${Duration.format(every)}`

  const logged = pruner.run.pipe(
    Effect.timed,
    Effect.flatMap(([took, result]) =>
      result.deleted > 0
        ? Effect.logInfo(`Audit retention: deleted ${result.deleted} records older than ${days} days`).pipe(
          Effect.annotateLogs({ deleted: result.deleted, batches: result.batches, retention_days: days, duration_ms: Math.round(Duration.toMillis(took)) })
        )
        : result.busy
        ? Effect.logDebug(`Audit retention: another instance is pruning; ${next}`)
        : Effect.void
    ),
    // Whatever ends a run (a defect too) ends only the run: the database's own failure is told to
    // the outage tracker (one WARN per outage, docs/operations.md#outages), anything else is one
    // WARN with its reply in `cause`; the next run comes on schedule.
    Effect.catchCause((cause) => {
      const error = Cause.squash(cause)
      return reportDatabaseFailure(error, "audit retention", Effect.logWarning(`Audit retention run failed; ${next}`, error))
    }),
    Effect.withSpan("AuditRetention.run", undefined, { captureStackTrace: false })
  )

  yield* Effect.forkScoped(Effect.gen(function*() {
    yield* Effect.sleep(schedule.firstRunAfter)
    for (;;) {
      yield* logged
      yield* Effect.sleep(every)
    }
  }))

  return { run: pruner.run }
})

/**
 * The pruning fiber (AUDIT_RETENTION_DAYS > 0; App.ts chooses): `layer` runs it on its schedule
 * under the Layer's scope (needs `SqlClient`); its `run` is one run now.
 */
export class AuditRetention extends Context.Service<AuditRetention, {
  readonly run: Effect.Effect<PruneRun, SqlError.SqlError>
}>()("AuditLogs/Retention") {
  static readonly layer = Layer.effect(AuditRetention, make)
}
