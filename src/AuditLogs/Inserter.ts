/**
 * Batches into PostgreSQL: an outage is waited out (the batch is retried with capped backoff, never
 * discarded), a batch refused for its content is written record by record, and a record refused
 * even reduced is dropped and counted. A defect while writing a batch (a throw in the driver's
 * encoder) is the content's too, never the writer's end. Redelivery is idempotent: each record
 * carries an `entry_id` (ON CONFLICT DO NOTHING).
 */
import { Data, type Duration, Effect, Schedule } from "effect"
import type * as SqlError from "effect/sql/SqlError"
import { sqlStateOf } from "../Db/Instrumentation.ts"
import { countDropped } from "./Dropped.ts"
import type { StoredEntry } from "./Entry.ts"
import { AuditRepo } from "./Repo.ts"
import { minimalEntry } from "./Storable.ts"

/** Capped exponential backoff, forever: a batch waits for the database, it is never discarded. */
const retryForever = Schedule.min([Schedule.exponential("100 millis"), Schedule.spaced("5 seconds")])

/**
 * An outage (no connection, the server shutting down or out of resources, a serialization
 * failure) is worth waiting for; any other SQLSTATE (data exception 22, constraint 23, program
 * limit 54 — "index row size exceeds maximum", …) belongs to a record and never goes away.
 * The SQLSTATE is on the reason's cause (`error.cause` is the reason itself); a failure with none
 * never reached the server.
 */
export const isOutage = (error: SqlError.SqlError): boolean => {
  if (error.reason._tag === "ConnectionError") return true
  const code = sqlStateOf(error)
  return code === undefined || /^(08|40|53|57|58|XX)/.test(code)
}

/** A defect while writing a batch: it belongs to the batch's content, as a refusal does. */
class WriteDefect extends Data.TaggedError("WriteDefect")<{ readonly cause: unknown }> {}

/** Worth retrying: an outage; a refusal or a defect is the content's and never goes away. */
const retryable = (error: SqlError.SqlError | WriteDefect) => error._tag === "SqlError" && isOutage(error)

export const makeInserter = Effect.gen(function*() {
  const repo = yield* AuditRepo
  let failing = false
  const write = (batch: ReadonlyArray<StoredEntry>) =>
    repo.insertBatch(batch).pipe(Effect.catchDefect((cause) => Effect.fail(new WriteDefect({ cause }))))
  /** One record the batch could not take: as it is, then reduced to its minimum, then dropped and counted. */
  const insertOne = (stored: StoredEntry) =>
    write([stored]).pipe(
      Effect.catchIf((error) => !retryable(error), () => write([minimalEntry(stored)])),
      Effect.catchIf((error) => !retryable(error), (error) => countDropped(1, "refused", error))
    )
  /**
   * A batch the database refused for its content is written record by record, so one poison
   * record never blocks the ones behind it (docs/audit.md#guarantees); an outage fails the attempt.
   */
  const attempt = (batch: ReadonlyArray<StoredEntry>) =>
    write(batch).pipe(
      Effect.catchIf(
        (error) => !retryable(error),
        (error) =>
          Effect.logWarning("Audit batch refused; writing its records one by one", error).pipe(
            Effect.andThen(Effect.forEach(batch, insertOne, { discard: true }))
          )
      )
    )
  /** Inserts one batch, retrying an outage until the database commits it (records already in are skipped by entry id). */
  return (batch: ReadonlyArray<StoredEntry>) =>
    attempt(batch).pipe(
      Effect.tapError((error) =>
        failing ? Effect.void : Effect.logWarning("Audit batch not written; retrying until the database is back", error)
          .pipe(Effect.andThen(Effect.sync(() => {
            failing = true
          })))
      ),
      Effect.retry(retryForever),
      Effect.tap(() =>
        Effect.sync(() => {
          if (failing) failing = false
        })
      ),
      Effect.orDie
    )
})

/** Writes `records` in batches until done or `timeout`; returns the count not written. */
export const flushWithin = (
  insert: (batch: ReadonlyArray<StoredEntry>) => Effect.Effect<void>,
  records: ReadonlyArray<StoredEntry>,
  batchMax: number,
  timeout: Duration.Input
) => {
  let written = 0
  return Effect.gen(function*() {
    for (let i = 0; i < records.length; i += batchMax) {
      const batch = records.slice(i, i + batchMax)
      yield* insert(batch)
      written += batch.length
    }
  }).pipe(Effect.timeoutOption(timeout), Effect.map(() => records.length - written))
}
