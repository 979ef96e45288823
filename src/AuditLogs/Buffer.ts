/**
 * The in-process buffer of audit records and its writer fiber, which inserts them in batches
 * (Inserter.ts); the in-process writer (Writer.ts) records into it, and the Redis writer
 * (StreamWriter.ts) falls back to it.
 */
import { type Duration, Effect, Fiber, Queue } from "effect"
import { auditBufferBytes } from "../Observability/Metrics.ts"
import { countDropped } from "./Dropped.ts"
import type { AuditEntry, StoredEntry } from "./Entry.ts"
import { flushWithin, makeInserter } from "./Inserter.ts"
import { requestDataJson } from "./RequestData.ts"
import { supervised } from "./Supervise.ts"
import type { WriterOptions } from "./WriterOptions.ts"

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
    /** The batch taken and not yet written: a writer that stopped with it takes it again first. */
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
      if (inFlight.length === 0) {
        const taken = yield* Queue.takeBetween(queue, 1, options.batchMax)
        setBufferedBytes(bufferedBytes - sumBytes(taken))
        inFlight = taken.map((item) => item.stored)
      }
      yield* insert(inFlight)
      inFlight = []
    }))
    const fiber = yield* supervised("buffer writer", loop)
    /** Stops the fiber and writes what it held and what is queued (the batch in flight may be written twice: idempotent). */
    const flush = (timeout: Duration.Input) => Effect.gen(function*() {
      yield* Fiber.interrupt(fiber)
      // `Queue.clear`, not `takeAll`: that one waits for at least one record.
      const queued = yield* Queue.clear(queue)
      setBufferedBytes(bufferedBytes - sumBytes(queued))
      const rest = [...inFlight, ...queued.map((item) => item.stored)]
      const left = yield* flushWithin(insert, rest, options.batchMax, timeout)
      yield* countDropped(left, "shutdown")
    })
    /** Its batch inserter, for the stream path to share (one retry loop, one outage warning). */
    return { offer, flush, insert } as const
  })
