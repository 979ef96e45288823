/**
 * The audit writer with Redis (CONTRACT §6): `record` appends to a Redis Stream (XADD; a request
 * waits for its record's XADD at most 100 ms, so an answered request has a durable record; the
 * records of concurrent requests go in one pipeline) and a consumer group feeds the batch inserter
 * of Writer.ts; entries are acknowledged (XACK + XDEL) only after their batch committed. Entries of
 * a killed instance stay pending: the restarted instance (same consumer name) reads them first, any
 * other claims them with XAUTOCLAIM. A record whose XADD fails (Redis down) falls back to the
 * in-process buffer. Every command has a deadline (Review F11): a blocking read its block plus
 * COMMAND_TIMEOUT_MS, the others COMMAND_TIMEOUT_MS (Store/Redis.ts), the XADD pipeline 2 s.
 */
import { Duration, Effect, Fiber, Queue } from "effect"
import type { Redis } from "ioredis"
import { hostname } from "node:os"
import { AppConfig } from "../Config.ts"
import { COMMAND_TIMEOUT_MS, isDisconnected, RedisClient, redisCommand } from "../Store/Redis.ts"
import { AuditLog, type AuditEntry } from "./AuditLog.ts"
import { INSERT_BATCH_MAX, type StoredEntry } from "./Repo.ts"
import {
  countDropped,
  defaultWriterOptions,
  flushBudgetMs,
  makeBuffer,
  newEntry,
  ShutdownDeadline,
  type WriterOptions
} from "./Writer.ts"

type StreamEntry = { readonly id: string; readonly stored: StoredEntry | undefined }

/** A record on its way to the stream, and how to let the request that waits for it go on. */
type PendingAppend = { readonly stored: StoredEntry; readonly resume: () => void }

/** A batch of XADDs Redis has not answered by then goes to the in-process buffer. */
const APPEND_TIMEOUT_MS = 2000
/** The longest a request waits for its record's XADD (loopback Redis answers in well under 1 ms). */
const REQUEST_WAIT_MS = 100
/** How long the consumer's XREADGROUP blocks for new entries. */
const BLOCK_MS = 1000

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
    const buffer = yield* makeBuffer(options)
    const insert = buffer.insert
    const shutdown = yield* ShutdownDeadline
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

    /** Fails at once while the connection is down: the caller retries (or, at shutdown, leaves the entries pending). */
    const readGroup = (client: Redis, id: ">" | "0", blockMs: number | undefined) =>
      isDisconnected(client) ? Effect.fail(new Error(`Redis ${client.status}`)) : redisCommand(
        "XREADGROUP",
        () =>
          client.call(
            "XREADGROUP", "GROUP", group, consumer, "COUNT", String(INSERT_BATCH_MAX),
            ...(blockMs === undefined ? [] : ["BLOCK", String(blockMs)]), "STREAMS", stream, id
          ),
        (blockMs ?? 0) + COMMAND_TIMEOUT_MS
      ).pipe(Effect.map(parseRead))

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
        yield* commit(reader, yield* readGroup(reader, ">", BLOCK_MS))
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
        // buffer first: its records exist nowhere else (what it cannot write is counted, reason
        // `shutdown`). Then whatever this instance holds or is still queued in the stream; what
        // does not fit, or finds Redis or PostgreSQL away, stays in the stream for the next consumer.
        const deadline = Date.now() + flushBudgetMs(options, shutdown)
        yield* buffer.flush(Math.max(0, deadline - Date.now()))
        let drained = 0
        const drain = Effect.gen(function*() {
          for (const id of ["0", ">"] as const) {
            while (true) {
              const entries = yield* readGroup(redis.client, id, undefined)
              if (entries.length === 0) break
              yield* commit(redis.client, entries)
              drained += entries.length
            }
          }
          return true
        })
        const done = yield* drain.pipe(
          Effect.timeoutOption(Math.max(0, deadline - Date.now())),
          Effect.map((finished) => finished._tag === "Some"),
          Effect.catch((error) => Effect.as(Effect.logWarning("Audit stream not drained at shutdown", error), false))
        )
        if (!done) {
          yield* Effect.logWarning("Audit stream entries left pending at shutdown; the next consumer writes them").pipe(
            Effect.annotateLogs({ drained })
          )
        }
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
