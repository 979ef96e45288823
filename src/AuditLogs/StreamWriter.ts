/**
 * The audit writer with Redis (docs/audit.md#guarantees). The Redis Stream is the records' journal, read back
 * only when its writer is gone:
 * - `record` appends to the stream (XADD; a request waits for its record's XADD at most 100 ms,
 *   so an answered request has a durable record; the records of concurrent requests go in one
 *   pipeline, under one deadline). A record whose XADD fails (Redis down) goes to the in-process
 *   buffer instead.
 * - The appended records go on, in memory, to the batch inserter of Inserter.ts; each batch's
 *   entries are deleted from the stream (XDEL) once it committed, in the next pipeline of XADDs
 *   (or on their own when none comes). Nothing reads the stream back on
 *   this path (no consumer group: XREADGROUP, a JSON decode per record and XACK would be work for
 *   a copy the process already holds). A stream that carries a consumer group is read the same way
 *   at start: its entries not yet deleted are written; the group is left unused.
 * - Recovery: at start, an instance writes and deletes every entry already in the stream (a
 *   killed instance's, also a restarted one's own); later, every `claimIdle / 2`, the entries
 *   older than `claimIdle`, whose writer is gone or far behind. Entries the memory bound leaves
 *   out (`streamHeldMax`, PostgreSQL down for long) are written that way too. A record written twice
 *   (by its writer and a scan) is stored once: the insert is idempotent by `entry_id`.
 * Every command has a deadline: COMMAND_TIMEOUT_MS (Store/Redis.ts), the XADD
 * pipeline 2 s.
 */
import { Duration, Effect, Fiber, Option, Queue } from "effect"
import { isDisconnected, RedisClient, redisCommand } from "../Store/Redis.ts"
import { type AuditEntry, newEntry, type StoredEntry } from "./Entry.ts"
import { INSERT_BATCH_MAX } from "./Repo.ts"
import { requestDataJson } from "./RequestData.ts"
import { makeBuffer } from "./Buffer.ts"
import { countDropped } from "./Dropped.ts"
import { defaultWriterOptions, flushBudgetMs, type WriterOptions } from "./WriterOptions.ts"
import { ShutdownDeadline } from "../Lifecycle.ts"

/** A record in the stream: its entry id there, and the record (undefined: not one of ours, deleted unwritten). */
type Journaled = { readonly id: string; readonly stored: StoredEntry | undefined }

/**
 * The requests whose records were offered while one deadline ran (from the first of them until the
 * appender took them): each goes on at its XADD's answer or at the deadline, whichever comes first.
 * One timer per batch instead of one per record.
 */
interface Waiters {
  /** Those still waiting. */
  left: number
  timer: ReturnType<typeof setTimeout> | undefined
  readonly all: Array<Waiter>
}

/** A request waiting for its record's XADD. */
interface Waiter {
  resume: ((effect: Effect.Effect<void>) => void) | undefined
  readonly group: Waiters
}

/** A record on its way to the stream, and the request that waits for it. */
type PendingAppend = { readonly stored: StoredEntry; readonly waiter: Waiter }

/** Queued by the committer when stream entries await deletion and no XADD may come to carry it. */
const DELETE = "delete" as const

/** A batch of XADDs Redis has not answered by then goes to the in-process buffer. */
const APPEND_TIMEOUT_MS = 2000
/** The longest a request waits for its record's XADD (loopback Redis answers in well under 1 ms). */
const REQUEST_WAIT_MS = 100

/** Lets a waiting request go on (once); the last one of its group stops the group's timer. */
const release = (waiter: Waiter) => {
  const resume = waiter.resume
  if (resume === undefined) return
  waiter.resume = undefined
  const group = waiter.group
  if (--group.left === 0 && group.timer !== undefined) {
    clearTimeout(group.timer)
    group.timer = undefined
  }
  resume(Effect.void)
}

/**
 * The stream entry: the record as JSON, with `request_data` spliced in as the text it was captured
 * as — still an object inside the entry, so an entry reads the same to this version and the last.
 */
const encodeEntry = ({ entry: e }: StoredEntry) => {
  const fields: Omit<AuditEntry, "timestamp" | "request_data"> & { readonly timestamp: string } = {
    timestamp: e.timestamp.toISOString(),
    user_id: e.user_id,
    username: e.username,
    user_roles: e.user_roles,
    action_type: e.action_type,
    resource: e.resource,
    outcome: e.outcome,
    ip_address: e.ip_address,
    user_agent: e.user_agent,
    request_id: e.request_id,
    correlation_id: e.correlation_id,
    response_status: e.response_status,
    duration_ms: e.duration_ms,
    error_message: e.error_message
  }
  return `${JSON.stringify(fields).slice(0, -1)},"request_data":${requestDataJson(e.request_data)}}`
}

const decodeEntry = (entryId: string | undefined, json: string | undefined): StoredEntry | undefined => {
  if (entryId === undefined || json === undefined) return undefined
  try {
    const raw = JSON.parse(json) as Omit<AuditEntry, "timestamp"> & { timestamp: string }
    return { entryId, entry: { ...raw, timestamp: new Date(raw.timestamp), request_data: raw.request_data ?? {} } }
  } catch {
    return undefined
  }
}

/** `[[id, [field, value, …]], …]` as XRANGE returns them. */
const parseEntries = (raw: unknown): Array<Journaled> => {
  if (!Array.isArray(raw)) return []
  return raw.flatMap((item): Array<Journaled> => {
    if (!Array.isArray(item) || typeof item[0] !== "string") return []
    const fields: unknown = item[1]
    const map = new Map<string, string>()
    if (Array.isArray(fields)) for (let i = 0; i + 1 < fields.length; i += 2) map.set(String(fields[i]), String(fields[i + 1]))
    return [{ id: item[0], stored: decodeEntry(map.get("id"), map.get("e")) }]
  })
}

/** One command's answer as a pipeline gives it: `[error, result]`. */
type PipelineResult = readonly [Error | null, unknown]
const settled = (sent: Promise<unknown>): Promise<PipelineResult> =>
  sent.then((result) => [null, result] as const, (error: unknown) => [error instanceof Error ? error : new Error(String(error)), undefined] as const)

/** Redis's clock in ms (TIME), so that "older than claimIdle" holds whatever this host's clock says. */
const redisMillis = (time: ReadonlyArray<string | number>) => Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)

export const makeStreamAuditLog = (options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    const redis = yield* RedisClient
    const buffer = yield* makeBuffer(options)
    const insert = buffer.insert
    const shutdown = yield* ShutdownDeadline
    const stream = `${redis.prefix}audit:stream`
    const claimIdleMs = Duration.toMillis(options.claimIdle)
    const commitLingerMs = Duration.toMillis(options.commitLinger)
    let backlog = 0
    const deleteWarning = (error: unknown) =>
      Effect.logWarning("Audit stream entries not deleted; a later scan writes them again (stored once)", error)

    /**
     * Deletes entries whose records committed, with the stream's length riding along (so the cap
     * is known again once the backlog shrinks). An entry whose XDEL fails stays in the stream and
     * is written again by a scan (stored once).
     */
    const deleteNow = (ids: ReadonlyArray<string>) =>
      ids.length === 0 ? Effect.void : redisCommand("XDEL", () => redis.client.pipeline().xdel(stream, ...ids).xlen(stream).exec()).pipe(
        Effect.map((results) => {
          const length = results?.[1]?.[1]
          if (typeof length === "number") backlog = length
        }),
        Effect.catch(deleteWarning)
      )

    /** Writes the entries' records, then deletes the entries: only after the commit. */
    const commit = (entries: ReadonlyArray<Journaled>) =>
      Effect.gen(function*() {
        if (entries.length === 0) return
        yield* insert(entries.flatMap((e) => (e.stored === undefined ? [] : [e.stored])))
        yield* deleteNow(entries.map((e) => e.id))
      })

    // Records wait here for the appender, which sends each batch as one pipeline of XADDs; the
    // request goes on once its record's XADD answered (an answered request has a durable record).
    // (One XADD per request, each raced against its own timeout, would cost a short request a
    // large share of its CPU.)
    // DELETE: committed entries wait for deletion (`deletable`) and no record may come to carry it.
    const appends = yield* Queue.unbounded<PendingAppend | typeof DELETE>()
    /** The deadline the next records join; the appender closes it when it takes them. */
    let open: Waiters | undefined
    /** Entries whose records committed: deleted with the next pipeline of XADDs (one round trip fewer per batch). */
    let deletable: Array<string> = []
    let deleteQueued = false

    // The hot path: appended records, in memory, to the inserter, whose entries are then deleted
    // along with the next appends.
    const journaled = yield* Queue.dropping<Journaled>(options.streamHeldMax)
    let committing: ReadonlyArray<Journaled> = []
    const committer = yield* Effect.forkDetach(Effect.forever(Effect.gen(function*() {
      committing = yield* Queue.takeBetween(journaled, 1, INSERT_BATCH_MAX)
      // A short wait lets the records of the next moments join the batch: one INSERT (and one
      // XDEL) for many records instead of one per few. The records are in the stream already, so
      // nothing waits on this but their visibility in the database.
      if (committing.length < INSERT_BATCH_MAX && commitLingerMs > 0) {
        yield* Effect.sleep(commitLingerMs)
        committing = committing.concat(yield* Queue.takeBetween(journaled, 0, INSERT_BATCH_MAX - committing.length))
      }
      yield* insert(committing.flatMap((e) => (e.stored === undefined ? [] : [e.stored])))
      for (const { id } of committing) deletable.push(id)
      committing = []
      if (!deleteQueued) {
        deleteQueued = true
        Queue.offerUnsafe(appends, DELETE)
      }
    })))

    /** Writes the entries up to `end` (an entry id or ms), a page at a time, each page after the last. */
    const scan = (end: string) =>
      Effect.gen(function*() {
        let start = "-"
        while (true) {
          if (isDisconnected(redis.client)) return yield* Effect.fail(new Error(`Redis ${redis.client.status}`))
          const page = parseEntries(yield* redisCommand("XRANGE", () =>
            redis.client.xrange(stream, start, end, "COUNT", INSERT_BATCH_MAX)))
          yield* commit(page)
          if (page.length < INSERT_BATCH_MAX) return
          start = `(${page[page.length - 1]!.id}`
        }
      })
    const now = redisCommand("TIME", () => redis.client.time()).pipe(Effect.map(redisMillis))
    // At start everything already in the stream (a previous run's entries), up to its last entry
    // before this writer appends anything, so that the scan does not write this writer's own
    // records again while their batch lingers (null: the stream was empty; unknown when Redis did
    // not answer, and then up to Redis's clock when the scan runs). Then, every claimIdle / 2,
    // what is older than claimIdle.
    const startEnd = yield* redisCommand("XREVRANGE", () => redis.client.xrevrange(stream, "+", "-", "COUNT", 1)).pipe(
      Effect.map((last) => last[0]?.[0] ?? null),
      Effect.option
    )
    let started = false
    const recover = Effect.gen(function*() {
      if (!started) {
        const end = Option.isSome(startEnd) ? startEnd.value : String(yield* now)
        if (end !== null) yield* scan(end)
        started = true
      }
      while (true) {
        yield* Effect.sleep(claimIdleMs / 2)
        yield* scan(String((yield* now) - claimIdleMs))
      }
    }).pipe(
      Effect.catch((error) =>
        Effect.logWarning("Audit stream recovery scan failed; retrying", error).pipe(Effect.andThen(Effect.sleep("1 second")))
      ),
      Effect.forever
    )
    const scanner = yield* Effect.forkDetach(recover)

    let appending: ReadonlyArray<PendingAppend> = []
    /**
     * Appends a batch (with the deletions waiting, after its XADDs): what Redis took goes on to
     * the inserter (or, past streamHeldMax, waits in the stream for a scan); what it refused or did
     * not answer in time goes to the in-process buffer. Deletions that did not go out wait for the
     * next pipeline (an XDEL sent twice deletes nothing twice).
     */
    const appendBatch = (batch: ReadonlyArray<PendingAppend>) => {
      const ids = deletable
      deletable = []
      deleteQueued = false
      const requeue = Effect.sync(() => {
        deletable = ids.concat(deletable)
      })
      // Not connected: straight to the buffer, so a Redis outage never slows requests.
      const refused = isDisconnected(redis.client)
        ? Effect.as(requeue, batch)
        : redisCommand("XADD", () => {
          // Issued as single commands, the client's auto-pipelining sends them in the same write
          // as the other commands of the moment (rate checks, bumps): one write per round trip.
          const client = redis.client
          const sent: Array<Promise<PipelineResult>> = []
          for (const { stored } of batch) sent.push(settled(client.xadd(stream, "*", "id", stored.entryId, "e", encodeEntry(stored))))
          if (ids.length > 0) sent.push(settled(client.xdel(stream, ...ids)))
          // The stream's length rides along, so the cap holds while PostgreSQL is down and nothing
          // is committed.
          sent.push(settled(client.xlen(stream)))
          return Promise.all(sent)
        }, APPEND_TIMEOUT_MS).pipe(
          Effect.flatMap((results) => {
            const length = results?.[results.length - 1]?.[1]
            if (typeof length === "number") backlog = length
            const deleted = ids.length === 0 ? undefined : results?.[batch.length]
            const warned = deleted === undefined || deleted[0] === null ? Effect.void : deleteWarning(deleted[0])
            return Effect.as(warned, batch.filter(({ stored }, i) => {
              const [error, id] = results?.[i] ?? [null, undefined]
              if (error !== null || typeof id !== "string") return true
              Queue.offerUnsafe(journaled, { id, stored })
              return false
            }))
          }),
          Effect.onInterrupt(() => requeue),
          Effect.catch((error) =>
            Effect.logWarning("Audit stream unavailable; records buffered in process", error).pipe(Effect.andThen(requeue), Effect.as(batch))
          )
        )
      return refused.pipe(
        Effect.flatMap((records) => Effect.forEach(records, ({ stored }) => buffer.offer(stored), { discard: true })),
        Effect.ensuring(Effect.sync(() => batch.forEach(({ waiter }) => release(waiter))))
      )
    }
    const appender = yield* Effect.forkDetach(Effect.forever(Effect.gen(function*() {
      const taken = yield* Queue.takeBetween(appends, 1, INSERT_BATCH_MAX)
      // Records offered from now on wait under a deadline of their own.
      open = undefined
      appending = taken.filter((item): item is PendingAppend => item !== DELETE)
      if (appending.length > 0 || deletable.length > 0) yield* appendBatch(appending)
      appending = []
    })))
    /** Closing: what waits for the appender goes to the in-process buffer (written by its flush; a record both there and in the stream is stored once). */
    let closed = false
    const stopAppender = Effect.gen(function*() {
      closed = true
      yield* Fiber.interrupt(appender)
      const left = [...appending, ...(yield* Queue.clear(appends))].filter((item): item is PendingAppend => item !== DELETE)
      yield* Effect.forEach(left, ({ stored }) => buffer.offer(stored), { discard: true })
      left.forEach(({ waiter }) => release(waiter))
    })

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* stopAppender
        yield* Fiber.interrupt(scanner)
        yield* Fiber.interrupt(committer)
        // One deadline for both (exit within 10 s in every state: docs/operations.md#shutdown). The in-process
        // buffer first: its records exist nowhere else (what it cannot write is counted, reason
        // `shutdown`). Then the appended records this instance holds (the batch in flight may be
        // written twice: stored once); what does not fit, or finds Redis or PostgreSQL away, stays
        // in the stream, where the next instance to start (or any running one's scan) writes it.
        const deadline = Date.now() + flushBudgetMs(options, shutdown)
        yield* buffer.flush(Math.max(0, deadline - Date.now()))
        const held = [...committing, ...(yield* Queue.clear(journaled))]
        let written = 0
        const write = Effect.gen(function*() {
          // Entries committed whose deletion was waiting for the next pipeline.
          const ids = deletable
          deletable = []
          yield* deleteNow(ids)
          for (let i = 0; i < held.length; i += INSERT_BATCH_MAX) {
            const batch = held.slice(i, i + INSERT_BATCH_MAX)
            yield* commit(batch)
            written += batch.length
          }
        })
        const done = yield* write.pipe(
          Effect.timeoutOption(Math.max(0, deadline - Date.now())),
          Effect.map((finished) => finished._tag === "Some")
        )
        if (!done) {
          yield* Effect.logWarning("Audit records left in the stream at shutdown; the next instance writes them").pipe(
            Effect.annotateLogs({ written, left: held.length - written })
          )
        }
      })
    )

    return {
      record: (entry: AuditEntry): Effect.Effect<void> =>
        backlog >= options.streamMax
          ? countDropped(1, "stream_full")
          : closed
          ? buffer.offer(newEntry(entry))
          : Effect.callback<void>((resume) => {
            // The request waits for its XADD (so an answered request has a durable record) but
            // never longer than REQUEST_WAIT_MS from the first record of its batch: a Redis that
            // accepts and does not answer must not slow requests (docs/audit.md#guarantees); the record still
            // goes to the stream or the buffer.
            let group = open
            if (group === undefined) {
              const waiters: Waiters = { left: 0, timer: undefined, all: [] }
              waiters.timer = setTimeout(() => {
                waiters.timer = undefined
                if (open === waiters) open = undefined
                for (const waiter of waiters.all) release(waiter)
              }, REQUEST_WAIT_MS)
              group = open = waiters
            }
            const waiter: Waiter = { resume, group }
            group.all.push(waiter)
            group.left++
            Queue.offerUnsafe(appends, { stored: newEntry(entry), waiter })
          })
    }
  })
