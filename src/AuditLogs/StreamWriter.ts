/**
 * The audit writer with Redis (docs/audit.md#guarantees). The Redis Stream is the records' journal, read back
 * only when its writer is gone (its layout: Journal.ts, docs/audit.md#the-redis-journal):
 * - `record` appends to the stream; the records offered while one append is under way wait for
 *   the next, and go to the stream together, as ONE entry (one script call: the XADD, the deletions
 *   waiting, the stream's record count), so a burst of concurrent requests costs one command and
 *   later one deleted id. A request waits for its entry's answer at most 100 ms, so an answered
 *   request has a durable record. Records whose append fails (Redis down) go to the in-process
 *   buffer instead.
 * - The appended records go on, in memory, to the batch inserter of Inserter.ts; an entry is
 *   deleted from the stream (XDEL) once all its records committed (they may be in two batches),
 *   with the next append (or on its own when none comes). Nothing reads the stream back on this
 *   path (no consumer group: XREADGROUP, a JSON decode per record and XACK would be work for a copy
 *   the process already holds). A stream that carries a consumer group is read the same way at
 *   start: its entries not yet deleted are written; the group is left unused.
 * - Recovery: at start, an instance writes and deletes every entry already in the stream (a
 *   killed instance's, also a restarted one's own); later, every `claimIdle / 2`, the entries
 *   older than `claimIdle`, whose writer is gone or far behind. Entries the memory bound leaves
 *   out (`streamHeldMax`, PostgreSQL down for long) are written that way too. Both streams are
 *   read so: this release's, and the previous release's single-record one, which its instances
 *   still write during a rolling update. A record written twice (by its writer and a scan) is
 *   stored once: the insert is idempotent by `entry_id`.
 * Every command has a deadline: COMMAND_TIMEOUT_MS (Store/Redis.ts), the append 2 s.
 */
import { Duration, Effect, Fiber, Option, Queue } from "effect"
import { RedisClient } from "../Store/Redis.ts"
import { type AuditEntry, newEntry, type StoredEntry } from "./Entry.ts"
import { parseJournal } from "./Journal.ts"
import { type Deletion, type JournalStore, type JournalStream, redisJournalStore } from "./JournalStore.ts"
import { makeBuffer } from "./Buffer.ts"
import { countDropped } from "./Dropped.ts"
import { defaultWriterOptions, flushBudgetMs, type WriterOptions } from "./WriterOptions.ts"
import { ShutdownDeadline } from "../Lifecycle.ts"

/** An entry this writer appended: deleted once none of its records is left uncommitted. */
interface Appended extends Deletion {
  left: number
}

/** An appended record held in memory on its way to the inserter. */
type Held = { readonly entry: Appended; readonly stored: StoredEntry }

/**
 * The requests whose records were offered while one deadline ran (from the first of them until the
 * appender took them): each goes on at its entry's answer or at the deadline, whichever comes first.
 * One timer per batch instead of one per record.
 */
interface Waiters {
  /** Those still waiting. */
  left: number
  timer: ReturnType<typeof setTimeout> | undefined
  readonly all: Array<Waiter>
}

/** A request waiting for its record's append. */
interface Waiter {
  resume: ((effect: Effect.Effect<void>) => void) | undefined
  readonly group: Waiters
}

/** A record on its way to the stream, and the request that waits for it. */
type PendingAppend = { readonly stored: StoredEntry; readonly waiter: Waiter }

/** Queued by the committer when stream entries await deletion and no append may come to carry it. */
const DELETE = "delete" as const

/** An append Redis has not answered by then goes to the in-process buffer. */
const APPEND_TIMEOUT_MS = 2000
/** The longest a request waits for its record's append (loopback Redis answers in well under 1 ms). */
const REQUEST_WAIT_MS = 100
/** About how many batches a recovery scan reads at once (an entry of this release holds up to a batch). */
const SCAN_PAGE_BATCHES = 10

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

export const makeStreamAuditLog = (options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    return yield* makeJournalWriter(redisJournalStore(yield* RedisClient), options)
  })

export const makeJournalWriter = (store: JournalStore, options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    const INSERT_BATCH_MAX = options.batchMax
    const SCAN_PAGE_RECORDS = SCAN_PAGE_BATCHES * INSERT_BATCH_MAX
    const buffer = yield* makeBuffer(options)
    const insert = buffer.insert
    const shutdown = yield* ShutdownDeadline
    const claimIdleMs = Duration.toMillis(options.claimIdle)
    const commitLingerMs = Duration.toMillis(options.commitLinger)
    /** Records in this release's stream, as its last append or deletion answered. */
    let backlog = 0
    const deleteWarning = (error: unknown) =>
      Effect.logWarning("Audit stream entries not deleted; a later scan writes them again (stored once)", error)

    /**
     * One call: appends `records` as one entry (none when empty) and deletes `deletions`; answers
     * the new entry's id (undefined: none) and keeps the stream's record count for the cap.
     */
    const journal = (records: ReadonlyArray<StoredEntry>, deletions: ReadonlyArray<Deletion>, timeoutMs?: number) =>
      store.journal(records, deletions, timeoutMs).pipe(
        Effect.map(({ held, id }) => {
          if (held !== undefined) backlog = held
          return id
        })
      )

    /** Deletes entries whose records committed. An entry whose deletion fails is written again by a scan (stored once). */
    const deleteNow = (deletions: ReadonlyArray<Deletion>) =>
      deletions.length === 0 ? Effect.void : journal([], deletions).pipe(Effect.asVoid, Effect.catch(deleteWarning))

    // Records wait here for the appender, which sends each batch as one entry; the request goes on
    // once its entry was appended (an answered request has a durable record). (One XADD per
    // request, each raced against its own timeout, would cost a short request a large share of its CPU.)
    // DELETE: committed entries wait for deletion (`deletable`) and no record may come to carry it.
    const appends = yield* Queue.unbounded<PendingAppend | typeof DELETE>()
    /** The deadline the next records join; the appender closes it when it takes them. */
    let open: Waiters | undefined
    /** Entries whose records all committed: deleted with the next append (one round trip fewer per batch). */
    let deletable: Array<Deletion> = []
    let deleteQueued = false
    const takeDeletable = () => {
      const taken = deletable
      deletable = []
      return taken
    }

    // The hot path: appended records, in memory, to the inserter; an entry is deleted along with
    // the next append once all its records are in. Bounded in records (streamHeldMax): a record
    // left out keeps its entry in the stream, for a scan.
    const held = yield* Queue.dropping<Held>(options.streamHeldMax)
    let committing: ReadonlyArray<Held> = []
    /** Inserts held records; an entry none of whose records is left becomes deletable. */
    const commitHeld = (records: ReadonlyArray<Held>) =>
      Effect.gen(function*() {
        yield* insert(records.map((h) => h.stored))
        for (const { entry } of records) if (--entry.left === 0) deletable.push(entry)
      })
    const committer = yield* Effect.forkDetach(Effect.forever(Effect.gen(function*() {
      committing = yield* Queue.takeBetween(held, 1, INSERT_BATCH_MAX)
      // A short wait lets the records of the next moments join the batch: one INSERT (and one
      // deletion) for many records instead of one per few. The records are in the stream already,
      // so nothing waits on this but their visibility in the database.
      if (committing.length < INSERT_BATCH_MAX && commitLingerMs > 0) {
        yield* Effect.sleep(commitLingerMs)
        committing = committing.concat(yield* Queue.takeBetween(held, 0, INSERT_BATCH_MAX - committing.length))
      }
      yield* commitHeld(committing)
      committing = []
      if (deletable.length > 0 && !deleteQueued) {
        deleteQueued = true
        Queue.offerUnsafe(appends, DELETE)
      }
    })))

    /**
     * Writes the entries of one stream up to `end` (an entry id or ms), a page at a time, each page
     * after the last, then deletes them (an entry only once all its records committed).
     * `perEntry`: the most records an entry of that stream holds, for the first page's size.
     */
    const scan = (stream: JournalStream, end: string, perEntry: number) =>
      Effect.gen(function*() {
        let start = "-"
        let count = Math.max(1, Math.floor(SCAN_PAGE_RECORDS / perEntry))
        while (true) {
          if (store.isDown()) return yield* Effect.fail(new Error("Redis unreachable"))
          const page = parseJournal(yield* store.range(stream, start, end, count))
          const records = page.flatMap((e) => e.records)
          for (let i = 0; i < records.length; i += INSERT_BATCH_MAX) yield* insert(records.slice(i, i + INSERT_BATCH_MAX))
          yield* stream === "v2"
            ? deleteNow(page.map(({ id, counted }) => ({ id, records: counted })))
            : page.length === 0
            ? Effect.void
            : store.deleteV1(page.map((e) => e.id)).pipe(Effect.catch(deleteWarning))
          if (page.length < count) return
          start = `(${page[page.length - 1]!.id}`
          count = Math.min(INSERT_BATCH_MAX, Math.max(1, Math.floor(SCAN_PAGE_RECORDS * page.length / Math.max(1, records.length))))
        }
      })
    /** Both streams up to their ends: the previous release's (an entry a record), then this one's. */
    const scanBoth = (legacyEnd: string | null, currentEnd: string | null) =>
      Effect.gen(function*() {
        if (legacyEnd !== null) yield* scan("v1", legacyEnd, 1)
        if (currentEnd !== null) yield* scan("v2", currentEnd, INSERT_BATCH_MAX)
      })
    const now = store.now
    // At start everything already in the streams (a previous run's entries), up to each one's last
    // entry before this writer appends anything, so that the scan does not write this writer's own
    // records again while their batch lingers (null: the stream was empty; unknown when Redis did
    // not answer, and then up to Redis's clock when the scan runs). Then, every claimIdle / 2,
    // what is older than claimIdle.
    const startEnds = yield* Effect.all([store.lastId("v1"), store.lastId("v2")], { concurrency: 2 }).pipe(Effect.option)
    let started = false
    const recover = Effect.gen(function*() {
      if (!started) {
        if (Option.isSome(startEnds)) yield* scanBoth(...startEnds.value)
        else {
          const end = String(yield* now)
          yield* scanBoth(end, end)
        }
        started = true
      }
      while (true) {
        yield* Effect.sleep(claimIdleMs / 2)
        const end = String((yield* now) - claimIdleMs)
        yield* scanBoth(end, end)
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
     * Appends a batch as one entry (with the deletions waiting, in the same call): what Redis took
     * goes on to the inserter (or, past streamHeldMax, waits in the stream for a scan); what it
     * refused or did not answer in time goes to the in-process buffer. Deletions that did not go
     * out wait for the next append (an id deleted twice deletes nothing, and counts nothing, twice).
     */
    const appendBatch = (batch: ReadonlyArray<PendingAppend>) => {
      const ids = takeDeletable()
      deleteQueued = false
      const requeue = Effect.sync(() => {
        deletable = ids.concat(deletable)
      })
      // Not connected: straight to the buffer, so a Redis outage never slows requests.
      // Issued as a single command, the client's auto-pipelining sends it in the same write as the
      // other commands of the moment (rate checks, bumps): one write per round trip.
      const refused = store.isDown()
        ? Effect.as(requeue, batch)
        : journal(batch.map((p) => p.stored), ids, APPEND_TIMEOUT_MS).pipe(
          Effect.map((id) => {
            if (batch.length === 0 || id === undefined) return batch
            const entry: Appended = { id, records: batch.length, left: batch.length }
            for (const { stored } of batch) Queue.offerUnsafe(held, { entry, stored })
            return []
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
        const left = [...committing, ...(yield* Queue.clear(held))]
        let written = 0
        const write = Effect.gen(function*() {
          // Entries committed whose deletion was waiting for the next append.
          yield* deleteNow(takeDeletable())
          for (let i = 0; i < left.length; i += INSERT_BATCH_MAX) {
            const batch = left.slice(i, i + INSERT_BATCH_MAX)
            yield* commitHeld(batch)
            yield* deleteNow(takeDeletable())
            written += batch.length
          }
        })
        const done = yield* write.pipe(
          Effect.timeoutOption(Math.max(0, deadline - Date.now())),
          Effect.map((finished) => finished._tag === "Some")
        )
        if (!done) {
          yield* Effect.logWarning("Audit records left in the stream at shutdown; the next instance writes them").pipe(
            Effect.annotateLogs({ written, left: left.length - written })
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
            // The request waits for its entry's append (so an answered request has a durable
            // record) but never longer than REQUEST_WAIT_MS from the first record of its batch: a
            // Redis that accepts and does not answer must not slow requests (docs/audit.md#guarantees);
            // the record still goes to the stream or the buffer.
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
