/**
 * The audit writer (docs/audit.md#guarantees): `record` never touches the database; a writer fiber inserts
 * records in batches, and nothing is lost.
 *
 * - In-process: a bounded buffer. A failed batch is retried with capped backoff until
 *   PostgreSQL answers (never discarded); overflow is counted (`audit_records_dropped_total`) and
 *   logged; closing the scope (SIGTERM) flushes the buffer and the batch in flight.
 * - With Redis: StreamWriter.ts, which uses this buffer as its fallback.
 * Redelivery is idempotent: each record carries an `entry_id` (ON CONFLICT DO NOTHING).
 */
import { Duration, Effect, Fiber, Queue, Schedule } from "effect"
import type * as SqlError from "effect/sql/SqlError"
import { sqlStateOf } from "../Db/Instrumentation.ts"
import { ShutdownDeadline } from "../Lifecycle.ts"
import { auditBufferBytes, type AuditDropReason, auditRecordsDroppedTotal } from "../Observability/Metrics.ts"
import { AuditLog, type AuditEntry, newEntry, type StoredEntry } from "./AuditLog.ts"
import { AuditRepo, INSERT_BATCH_MAX } from "./Repo.ts"
import { requestDataJson } from "./RequestData.ts"
import { minimalEntry } from "./Storable.ts"

export interface WriterOptions {
  /** Records the in-process buffer holds while the database is unreachable. */
  readonly bufferMax: number
  /** Estimated bytes the in-process buffer holds at most (records are up to ~25 KB); records over it are refused and counted. */
  readonly bufferMaxBytes: number
  /** Entries the Redis Stream may hold before new records are refused (and counted). */
  readonly streamMax: number
  /**
   * Records appended to the stream that the Redis writer holds in memory until their batch
   * commits; past it (PostgreSQL down or slow) they wait in the stream for the recovery scan.
   */
  readonly streamHeldMax: number
  /** How long a pending stream entry of another consumer waits before it is claimed. */
  readonly claimIdle: Duration.Input
  /** How long closing the scope may spend flushing. */
  readonly flushTimeout: Duration.Input
}

export const defaultWriterOptions: WriterOptions = {
  bufferMax: 100_000,
  bufferMaxBytes: 64 * 1024 * 1024,
  streamMax: 1_000_000,
  streamHeldMax: 5_000,
  claimIdle: "30 seconds",
  // docs/operations.md#shutdown: exit within 10 s of SIGTERM, flush included: main.ts drains HTTP for 5 s first.
  flushTimeout: "3500 millis"
}

/** How long the flush may take from now. */
export const flushBudgetMs = (options: WriterOptions, deadline: { readonly at: () => number | undefined }) => {
  const ms = Duration.toMillis(Duration.fromInputUnsafe(options.flushTimeout))
  const at = deadline.at()
  return at === undefined ? ms : Math.max(0, Math.min(ms, at - Date.now()))
}

/** Capped exponential backoff, forever: a batch waits for the database, it is never discarded. */
const retryForever = Schedule.min([Schedule.exponential("100 millis"), Schedule.spaced("5 seconds")])

const dropMessages: Record<AuditDropReason, string> = {
  buffer_full: "Audit records dropped: buffer full",
  stream_full: "Audit records dropped: audit stream backlog full",
  shutdown: "Audit records dropped: database unreachable at shutdown",
  refused: "Audit record dropped: the database refused it even reduced"
}

export const countDropped = (n: number, reason: AuditDropReason, error?: unknown) =>
  n === 0 ? Effect.void : Effect.andThen(
    Effect.sync(() => auditRecordsDroppedTotal.inc({ reason }, n)),
    Effect.logError(dropMessages[reason], ...(error === undefined ? [] : [error])).pipe(Effect.annotateLogs({ dropped: n, reason }))
  )

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

export const makeInserter = Effect.gen(function*() {
  const repo = yield* AuditRepo
  let failing = false
  /** One record the batch could not take: as it is, then reduced to its minimum, then dropped and counted. */
  const insertOne = (stored: StoredEntry) =>
    repo.insertBatch([stored]).pipe(
      Effect.catchIf((error) => !isOutage(error), () => repo.insertBatch([minimalEntry(stored)])),
      Effect.catchIf((error) => !isOutage(error), (error) => countDropped(1, "refused", error))
    )
  /**
   * A batch the database refused for its content is written record by record, so one poison
   * record never blocks the ones behind it (docs/audit.md#guarantees); an outage fails the attempt.
   */
  const attempt = (batch: ReadonlyArray<StoredEntry>) =>
    repo.insertBatch(batch).pipe(
      Effect.catchIf(
        (error) => !isOutage(error),
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
const flushWithin = (
  insert: (batch: ReadonlyArray<StoredEntry>) => Effect.Effect<void>,
  records: ReadonlyArray<StoredEntry>,
  timeout: Duration.Input
) => {
  let written = 0
  return Effect.gen(function*() {
    for (let i = 0; i < records.length; i += INSERT_BATCH_MAX) {
      const batch = records.slice(i, i + INSERT_BATCH_MAX)
      yield* insert(batch)
      written += batch.length
    }
  }).pipe(Effect.timeoutOption(timeout), Effect.map(() => records.length - written))
}

/** Fixed part of a buffered record's estimate: the object, its Date, its UUID, numbers, short fields. */
const RECORD_OVERHEAD_BYTES = 512

/**
 * A cheap upper-bound-ish estimate of the memory a buffered record holds: its strings' lengths
 * (two bytes a character, as V8 may store them), `request_data` included: captured, it is already
 * its JSON text (RequestData.ts), so nothing is serialized on the request path.
 */
export const estimateRecordBytes = (entry: AuditEntry): number => {
  let chars = entry.user_id.length + entry.username.length + entry.action_type.length + entry.resource.length +
    entry.ip_address.length + entry.user_agent.length + entry.request_id.length + entry.correlation_id.length +
    (entry.error_message?.length ?? 0)
  for (const role of entry.user_roles) chars += role.length
  return RECORD_OVERHEAD_BYTES + 2 * (chars + requestDataJson(entry.request_data).length)
}

/** A buffered record and its estimated size (counted in when offered, out when taken). */
interface Buffered {
  readonly stored: StoredEntry
  readonly bytes: number
}

const sumBytes = (items: ReadonlyArray<Buffered>) => {
  let total = 0
  for (const item of items) total += item.bytes
  return total
}

/**
 * The in-process buffer and its writer fiber; the Redis writer uses it as its fallback. Bounded
 * in records (`bufferMax`) and in estimated bytes (`bufferMaxBytes`, docs/audit.md#guarantees): a record that
 * would exceed either is refused and counted (`buffer_full`).
 */
export const makeBuffer = (options: WriterOptions) =>
  Effect.gen(function*() {
    const insert = yield* makeInserter
    const queue = yield* Queue.dropping<Buffered>(options.bufferMax)
    /** Estimated bytes of the records in `queue` (the batch in flight is out of it), also `audit_buffer_bytes`. */
    let bufferedBytes = 0
    const setBufferedBytes = (bytes: number) => {
      bufferedBytes = bytes
      auditBufferBytes.set(bytes)
    }
    let inFlight: ReadonlyArray<StoredEntry> = []
    const offer = (stored: StoredEntry) =>
      Effect.suspend(() => {
        const bytes = estimateRecordBytes(stored.entry)
        if (bufferedBytes + bytes > options.bufferMaxBytes) return countDropped(1, "buffer_full")
        setBufferedBytes(bufferedBytes + bytes)
        return Effect.flatMap(Queue.offer(queue, { stored, bytes }), (accepted) => {
          if (accepted) return Effect.void
          setBufferedBytes(bufferedBytes - bytes)
          return countDropped(1, "buffer_full")
        })
      })
    const loop = Effect.forever(Effect.gen(function*() {
      const taken = yield* Queue.takeBetween(queue, 1, INSERT_BATCH_MAX)
      setBufferedBytes(bufferedBytes - sumBytes(taken))
      inFlight = taken.map((item) => item.stored)
      yield* insert(inFlight)
      inFlight = []
    }))
    const fiber = yield* Effect.forkDetach(loop)
    /** Stops the fiber and writes what it held and what is queued (the batch in flight may be written twice: idempotent). */
    const flush = (timeout: Duration.Input) => Effect.gen(function*() {
      yield* Fiber.interrupt(fiber)
      // `Queue.clear`, not `takeAll`: that one waits for at least one record.
      const queued = yield* Queue.clear(queue)
      setBufferedBytes(bufferedBytes - sumBytes(queued))
      const rest = [...inFlight, ...queued.map((item) => item.stored)]
      const left = yield* flushWithin(insert, rest, timeout)
      yield* countDropped(left, "shutdown")
    })
    /** Its batch inserter, for the stream path to share (one retry loop, one outage warning). */
    return { offer, flush, insert } as const
  })

/** In-process writer (no Redis). */
export const makeBufferedAuditLog = (options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    const buffer = yield* makeBuffer(options)
    const shutdown = yield* ShutdownDeadline
    yield* Effect.addFinalizer(() => Effect.suspend(() => buffer.flush(flushBudgetMs(options, shutdown))))
    return AuditLog.of({ record: (entry) => buffer.offer(newEntry(entry)) })
  })
