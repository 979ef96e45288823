/**
 * The audit writer (CONTRACT §6): `record` never touches the database; a writer fiber inserts
 * records in batches, and nothing is lost.
 *
 * - In-process: a bounded buffer. A failed batch is retried with capped backoff until
 *   PostgreSQL answers (never discarded); overflow is counted (`audit_records_dropped_total`) and
 *   logged; closing the scope (SIGTERM) flushes the buffer and the batch in flight.
 * - With Redis: `record` appends to a Redis Stream (XADD, awaited, so an answered request has a
 *   durable record; the records of concurrent requests go in one pipeline) and a consumer group
 *   feeds the writer; entries are acknowledged (XACK + XDEL)
 *   only after their batch committed. Entries of a killed instance stay pending: the restarted
 *   instance (same consumer name) reads them first, any other claims them with XAUTOCLAIM. A
 *   record whose XADD fails (Redis down) falls back to the in-process buffer.
 * Redelivery is idempotent: each record carries an `entry_id` (ON CONFLICT DO NOTHING).
 */
import { Duration, Effect, Fiber, Layer, Option, Queue, Schedule } from "effect"
import type * as SqlError from "effect/sql/SqlError"
import type { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { hostname } from "node:os"
import { AppConfig } from "../Config.ts"
import { sqlStateOf } from "../Db/Instrumentation.ts"
import { type AuditDropReason, auditRecordsDroppedTotal } from "../Observability/Metrics.ts"
import { isDisconnected, RedisClient, redisCommand } from "../Store/Redis.ts"
import { AuditLog, type AuditEntry } from "./AuditLog.ts"
import { AuditRepo, INSERT_BATCH_MAX, type StoredEntry } from "./Repo.ts"
import { requestDataBytes } from "./RequestData.ts"
import { minimalEntry } from "./Storable.ts"

export interface WriterOptions {
  /** Records the in-process buffer holds while the database is unreachable. */
  readonly bufferMax: number
  /** Estimated bytes the in-process buffer holds at most (records are up to ~25 KB); records over it are refused and counted. */
  readonly bufferMaxBytes: number
  /** Entries the Redis Stream may hold before new records are refused (and counted). */
  readonly streamMax: number
  /** How long a pending stream entry of another consumer waits before it is claimed. */
  readonly claimIdle: Duration.Input
  /** How long closing the scope may spend flushing. */
  readonly flushTimeout: Duration.Input
}

export const defaultWriterOptions: WriterOptions = {
  bufferMax: 100_000,
  bufferMaxBytes: 64 * 1024 * 1024,
  streamMax: 1_000_000,
  claimIdle: "30 seconds",
  // CONTRACT §5/§9: exit within 10 s of SIGTERM, flush included: main.ts drains HTTP for 5 s first.
  flushTimeout: "3500 millis"
}

/** Capped exponential backoff, forever: a batch waits for the database, it is never discarded. */
const retryForever = Schedule.min([Schedule.exponential("100 millis"), Schedule.spaced("5 seconds")])

const dropMessages: Record<AuditDropReason, string> = {
  buffer_full: "Audit records dropped: buffer full",
  stream_full: "Audit records dropped: audit stream backlog full",
  shutdown: "Audit records dropped: database unreachable at shutdown",
  refused: "Audit record dropped: the database refused it even reduced"
}

const countDropped = (n: number, reason: AuditDropReason, error?: unknown) =>
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

const makeInserter = Effect.gen(function*() {
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
   * record never blocks the ones behind it (CONTRACT §6); an outage fails the attempt.
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
 * (two bytes a character, as V8 may store them) and its `request_data`'s JSON size, known from
 * its capture (RequestData.ts) — no serialization on the request path.
 */
export const estimateRecordBytes = (entry: AuditEntry): number => {
  let chars = entry.user_id.length + entry.username.length + entry.action_type.length + entry.resource.length +
    entry.ip_address.length + entry.user_agent.length + entry.request_id.length + entry.correlation_id.length +
    (entry.error_message?.length ?? 0)
  for (const role of entry.user_roles) chars += role.length
  return RECORD_OVERHEAD_BYTES + 2 * chars + 2 * requestDataBytes(entry.request_data)
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
 * in records (`bufferMax`) and in estimated bytes (`bufferMaxBytes`, CONTRACT §6): a record that
 * would exceed either is refused and counted (`buffer_full`).
 */
const makeBuffer = (options: WriterOptions) =>
  Effect.gen(function*() {
    const insert = yield* makeInserter
    const queue = yield* Queue.dropping<Buffered>(options.bufferMax)
    /** Estimated bytes of the records in `queue` (the batch in flight is out of it). */
    let bufferedBytes = 0
    let inFlight: ReadonlyArray<StoredEntry> = []
    const offer = (stored: StoredEntry) =>
      Effect.suspend(() => {
        const bytes = estimateRecordBytes(stored.entry)
        if (bufferedBytes + bytes > options.bufferMaxBytes) return countDropped(1, "buffer_full")
        bufferedBytes += bytes
        return Effect.flatMap(Queue.offer(queue, { stored, bytes }), (accepted) => {
          if (accepted) return Effect.void
          bufferedBytes -= bytes
          return countDropped(1, "buffer_full")
        })
      })
    const loop = Effect.forever(Effect.gen(function*() {
      const taken = yield* Queue.takeBetween(queue, 1, INSERT_BATCH_MAX)
      bufferedBytes -= sumBytes(taken)
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
      bufferedBytes -= sumBytes(queued)
      const rest = [...inFlight, ...queued.map((item) => item.stored)]
      const left = yield* flushWithin(insert, rest, timeout)
      yield* countDropped(left, "shutdown")
    })
    return { offer, flush } as const
  })

/** Values the database would refuse are reduced when the batch is inserted (Storable.ts), not on the request's path. */
const newEntry = (entry: AuditEntry): StoredEntry => ({ entryId: randomUUID(), entry })

/** In-process writer (no Redis). */
export const makeBufferedAuditLog = (options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    const buffer = yield* makeBuffer(options)
    yield* Effect.addFinalizer(() => buffer.flush(options.flushTimeout))
    return AuditLog.of({ record: (entry) => buffer.offer(newEntry(entry)) })
  })

// ---------------------------------------------------------------------------------------------
// Redis Stream

type StreamEntry = { readonly id: string; readonly stored: StoredEntry | undefined }

/** A record on its way to the stream, and how to let the request that waits for it go on. */
type PendingAppend = { readonly stored: StoredEntry; readonly resume: () => void }

/** A batch of XADDs Redis has not answered by then goes to the in-process buffer. */
const APPEND_TIMEOUT_MS = 2000
/** The longest a request waits for its record's XADD (loopback Redis answers in well under 1 ms). */
const REQUEST_WAIT_MS = 100

const encodeEntry = (stored: StoredEntry) => JSON.stringify({ ...stored.entry, timestamp: stored.entry.timestamp.toISOString() })

const decodeEntry = (entryId: string | undefined, json: string | undefined): StoredEntry | undefined => {
  if (entryId === undefined || json === undefined) return undefined
  try {
    const raw = JSON.parse(json) as Omit<AuditEntry, "timestamp"> & { timestamp: string }
    return { entryId, entry: { ...raw, timestamp: new Date(raw.timestamp) } }
  } catch {
    return undefined
  }
}

/** `[[id, [field, value, …] | null], …]` as XREADGROUP and XAUTOCLAIM return them. */
const parseEntries = (raw: unknown): Array<StreamEntry> => {
  if (!Array.isArray(raw)) return []
  return raw.flatMap((item): Array<StreamEntry> => {
    if (!Array.isArray(item) || typeof item[0] !== "string") return []
    const fields: unknown = item[1]
    const map = new Map<string, string>()
    if (Array.isArray(fields)) for (let i = 0; i + 1 < fields.length; i += 2) map.set(String(fields[i]), String(fields[i + 1]))
    return [{ id: item[0], stored: decodeEntry(map.get("id"), map.get("e")) }]
  })
}

/** XREADGROUP's reply `[[stream, entries]]` (or null) → entries. */
const parseRead = (raw: unknown): Array<StreamEntry> =>
  Array.isArray(raw) && Array.isArray(raw[0]) ? parseEntries(raw[0][1]) : []

export const makeStreamAuditLog = (options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    const redis = yield* RedisClient
    const config = yield* AppConfig
    const insert = yield* makeInserter
    const buffer = yield* makeBuffer(options)
    const stream = `${redis.prefix}audit:stream`
    const group = "audit-writers"
    // Stable across restarts of the same instance, so a restarted process reads its own pending entries first.
    const consumer = `${hostname()}:${config.port}`
    const claimIdleMs = Duration.toMillis(options.claimIdle)
    let backlog = 0

    const ensureGroup = (client: Redis) =>
      redisCommand("XGROUP CREATE", () => client.call("XGROUP", "CREATE", stream, group, "0", "MKSTREAM")).pipe(
        Effect.catch((error) =>
          String((error.cause as Error | undefined)?.message).includes("BUSYGROUP") ? Effect.void : Effect.fail(error)
        )
      )

    /** Inserts the entries' records, then acknowledges and deletes them (only after the commit). */
    const commit = (client: Redis, entries: ReadonlyArray<StreamEntry>) =>
      Effect.gen(function*() {
        if (entries.length === 0) return
        yield* insert(entries.flatMap((e) => (e.stored === undefined ? [] : [e.stored])))
        const ids = entries.map((e) => e.id)
        yield* redisCommand("XACK+XDEL", () => client.multi().xack(stream, group, ...ids).xdel(stream, ...ids).exec())
      })

    const readGroup = (client: Redis, id: ">" | "0", blockMs: number | undefined) =>
      redisCommand("XREADGROUP", () =>
        client.call(
          "XREADGROUP", "GROUP", group, consumer, "COUNT", String(INSERT_BATCH_MAX),
          ...(blockMs === undefined ? [] : ["BLOCK", String(blockMs)]), "STREAMS", stream, id
        )).pipe(Effect.map(parseRead))

    let claimCursor = "0-0"
    let lastClaim = 0
    /** Entries other consumers left pending for `claimIdle` (a crashed instance's). */
    const claim = (client: Redis) =>
      redisCommand("XAUTOCLAIM", () =>
        client.call("XAUTOCLAIM", stream, group, consumer, String(claimIdleMs), claimCursor, "COUNT", String(INSERT_BATCH_MAX)))
        .pipe(Effect.map((raw) => {
          if (!Array.isArray(raw)) return []
          claimCursor = typeof raw[0] === "string" ? raw[0] : "0-0"
          return parseEntries(raw[1])
        }))

    const reader = yield* redis.duplicate
    const consume = Effect.gen(function*() {
      yield* ensureGroup(reader)
      // Our own entries left pending by a previous run of this instance.
      while (true) {
        const mine = yield* readGroup(reader, "0", undefined)
        if (mine.length === 0) break
        yield* commit(reader, mine)
      }
      while (true) {
        if (Date.now() - lastClaim >= claimIdleMs / 2 || claimCursor !== "0-0") {
          lastClaim = Date.now()
          yield* commit(reader, yield* claim(reader))
        }
        yield* commit(reader, yield* readGroup(reader, ">", 1000))
        backlog = yield* redisCommand("XLEN", () => reader.xlen(stream))
      }
    }).pipe(
      Effect.catch((error) =>
        Effect.logWarning("Audit stream consumer failed; retrying", error).pipe(Effect.andThen(Effect.sleep("1 second")))
      ),
      Effect.forever
    )
    const fiber = yield* Effect.forkDetach(consume)

    // Records wait here for the appender, which sends each batch as one pipeline of XADDs; the
    // request goes on once its record's XADD answered (an answered request has a durable record).
    // (One XADD per request, each raced against its own timeout, was ~15 % of a W6 request's CPU.)
    const appends = yield* Queue.unbounded<PendingAppend>()
    let appending: ReadonlyArray<PendingAppend> = []
    /** Appends a batch; what Redis refused or did not answer in time goes to the in-process buffer. */
    const appendBatch = (batch: ReadonlyArray<PendingAppend>) => {
      // Not connected: straight to the buffer, so a Redis outage never slows requests.
      const failed = isDisconnected(redis.client) ? Effect.succeed(batch) : redisCommand("XADD", () => {
        const pipeline = redis.client.pipeline()
        for (const { stored } of batch) pipeline.xadd(stream, "*", "id", stored.entryId, "e", encodeEntry(stored))
        // The stream's length rides along, so the cap holds while PostgreSQL is down and nothing
        // is committed (the consumer refreshes it only after a commit).
        pipeline.xlen(stream)
        return pipeline.exec()
      }, APPEND_TIMEOUT_MS).pipe(
        Effect.map((results) => {
          const length = results?.[batch.length]?.[1]
          if (typeof length === "number") backlog = length
          return batch.filter((_, i) => results?.[i]?.[0] !== null)
        }),
        Effect.catch((error) => Effect.as(Effect.logWarning("Audit stream unavailable; records buffered in process", error), batch))
      )
      return failed.pipe(
        Effect.flatMap((records) => Effect.forEach(records, ({ stored }) => buffer.offer(stored), { discard: true })),
        Effect.ensuring(Effect.sync(() => batch.forEach(({ resume }) => resume())))
      )
    }
    const appender = yield* Effect.forkDetach(Effect.forever(Effect.gen(function*() {
      appending = yield* Queue.takeBetween(appends, 1, INSERT_BATCH_MAX)
      yield* appendBatch(appending)
      appending = []
    })))
    /** Closing: what waits for the appender goes to the in-process buffer (written by its flush; a record both there and in the stream is stored once). */
    let closed = false
    const stopAppender = Effect.gen(function*() {
      closed = true
      yield* Fiber.interrupt(appender)
      const left = [...appending, ...(yield* Queue.clear(appends))]
      yield* Effect.forEach(left, ({ stored }) => buffer.offer(stored), { discard: true })
      left.forEach(({ resume }) => resume())
    })

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* stopAppender
        yield* Fiber.interrupt(fiber)
        // One deadline for both (CONTRACT §9: exit within 10 s in every state). The in-process
        // buffer first: its records exist nowhere else. Then whatever this instance holds or is
        // still queued in the stream; what does not fit stays in the stream for the next consumer.
        const deadline = Date.now() + Duration.toMillis(Duration.fromInputUnsafe(options.flushTimeout))
        yield* buffer.flush(options.flushTimeout)
        const drain = Effect.gen(function*() {
          for (const id of ["0", ">"] as const) {
            while (true) {
              const entries = yield* readGroup(redis.client, id, undefined)
              if (entries.length === 0) break
              yield* commit(redis.client, entries)
            }
          }
        })
        yield* drain.pipe(
          Effect.timeoutOption(Math.max(0, deadline - Date.now())),
          Effect.catch((error) => Effect.logWarning("Audit stream not drained at shutdown; entries stay pending", error))
        )
      })
    )

    return AuditLog.of({
      record: (entry) =>
        backlog >= options.streamMax
          ? countDropped(1, "stream_full")
          : closed
          ? buffer.offer(newEntry(entry))
          : Effect.callback<void>((resume) => {
            // The request waits for its XADD (so an answered request has a durable record) but
            // never longer than REQUEST_WAIT_MS: a Redis that accepts and does not answer must not
            // slow requests (CONTRACT §6); the record still goes to the stream or the buffer.
            let waiting = true
            const go = () => {
              if (!waiting) return
              waiting = false
              clearTimeout(timer)
              resume(Effect.void)
            }
            const timer = setTimeout(go, REQUEST_WAIT_MS)
            Queue.offerUnsafe(appends, { stored: newEntry(entry), resume: go })
          })
    })
  })

/**
 * The `AuditLog` the configuration asks for: none when `AUDIT_LOG_ENABLED=false`, the Redis Stream
 * writer when Redis is configured, else the in-process writer. Needs `SqlClient`.
 */
export const AuditLogLive = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  if (!config.auditLogEnabled) return AuditLog.none
  const redis = yield* Effect.serviceOption(RedisClient)
  const writer = Option.isSome(redis)
    ? Layer.effect(AuditLog, makeStreamAuditLog()).pipe(Layer.provide(Layer.succeed(RedisClient, redis.value)))
    : Layer.effect(AuditLog, makeBufferedAuditLog())
  return writer.pipe(Layer.provide(AuditRepo.layer))
}))
