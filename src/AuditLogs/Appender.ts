/**
 * The journal's appender (docs/audit.md#guarantees): `record` queues a record and its request
 * waits for the record's append, at most 100 ms; one fiber appends what was queued meanwhile as ONE
 * v3 entry, to the next shard in turn (one script call, which also deletes that shard's entries
 * waiting for deletion), so a burst of concurrent requests costs one command and later one deleted
 * id, and the appends spread over every shard. What Redis took is held for the committer (or, past
 * the memory bound, left in the stream for a scan); what it refused, or did not answer in time,
 * goes to the in-process buffer. (One XADD per request, each raced against its own timeout, would
 * cost a short request a large share of its CPU.)
 */
import { Effect, Queue } from "effect"
import { randomUUID } from "node:crypto"
import { auditRecordsDeferredTotal } from "../Observability/Metrics.ts"
import type { RedisError } from "../Store/Redis.ts"
import { countDropped } from "./Dropped.ts"
import { type AuditEntry, newEntry, type StoredEntry } from "./Entry.ts"
import { type CountedStream, SHARDS, type ShardStream } from "./Journal.ts"
import type { Append, Deletion, JournalStore } from "./JournalStore.ts"
import type { JournalState } from "./JournalState.ts"
import type { WriterOptions } from "./WriterOptions.ts"

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

/** Queued by the committer when entries await deletion: taken up by the next round with nothing to append, if they still wait (appendBatch). */
const DELETE = "delete" as const

/** An append Redis has not answered by then goes to the in-process buffer. */
export const APPEND_TIMEOUT_MS = 2000
/** The longest a request waits for its record's append (loopback Redis answers in well under 1 ms). */
export const REQUEST_WAIT_MS = 100

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

export interface AppenderDeps {
  readonly state: JournalState
  readonly store: JournalStore
  /** One script call (JournalStore `journal`), the stream's count observed: the new entry's id. */
  readonly journal: (
    stream: CountedStream,
    append: Append | undefined,
    deletions: ReadonlyArray<Deletion>,
    timeoutMs?: number
  ) => Effect.Effect<string | undefined, RedisError>
  /** The in-process buffer: where records go that the stream did not take. */
  readonly offer: (stored: StoredEntry) => Effect.Effect<void>
  readonly options: WriterOptions
}

export const makeAppender = ({ journal, offer, options, state, store }: AppenderDeps) =>
  Effect.gen(function*() {
    const appends = yield* Queue.unbounded<PendingAppend | typeof DELETE>()
    /** The deadline the next records join; the appender closes it when it takes them. */
    let open: Waiters | undefined
    /** The batch taken and not yet through (its records go to the buffer if the fiber stops with it). */
    let appending: ReadonlyArray<PendingAppend> = []
    let closed = false

    const toBuffer = (batch: ReadonlyArray<PendingAppend>) =>
      Effect.forEach(batch, ({ stored }) => offer(stored), { discard: true }).pipe(
        Effect.ensuring(Effect.sync(() => batch.forEach(({ waiter }) => release(waiter))))
      )

    /** Asks for the deletable entries' deletion: with the next appends to their shards, or on its own when none comes. */
    const askDeletion = () => void Queue.offerUnsafe(appends, DELETE)

    /** The shard the next append goes to: each in turn. */
    let shard = 0
    /** An append failed and none succeeded since: the failure was said. */
    let failing = false

    /**
     * One script call on `stream`: appends `batch` as one entry (none when empty) and deletes
     * `deletions`, which are given back when the call does not reach Redis. Answers the records
     * Redis did not take, and whether it took the call.
     */
    const call = (stream: ShardStream, batch: ReadonlyArray<PendingAppend>, deletions: ReadonlyArray<Deletion<ShardStream>>) => {
      const giveBack = Effect.sync(() => state.giveBack(deletions))
      const records = batch.map((p) => p.stored)
      const append = batch.length === 0 ? undefined : { records, batch: randomUUID() }
      return journal(stream, append, deletions, APPEND_TIMEOUT_MS).pipe(
        Effect.map((id) => {
          failing = false
          if (append === undefined || id === undefined) return { refused: batch, took: true }
          // Past the memory bound the entry waits in the stream for a scan (docs/audit.md#guarantees), counted.
          if (!state.admit(stream, id, append.batch, records)) auditRecordsDeferredTotal.inc(records.length)
          return { refused: [], took: true }
        }),
        Effect.onInterrupt(() => giveBack),
        Effect.catch((error) =>
          // Said once until an append succeeds again: the Redis outage itself is the outage tracker's
          // one line (docs/operations.md#outages), not a line per batch.
          (batch.length === 0 || failing ? Effect.void : Effect.logWarning("Audit stream unavailable; records buffered in process", error)).pipe(
            Effect.andThen(Effect.sync(() => {
              failing ||= batch.length > 0
            })),
            Effect.andThen(giveBack),
            Effect.as({ refused: batch, took: false })
          )
        )
      )
    }

    /**
     * Appends a batch as one entry to the next shard, carrying the entries of that shard waiting
     * for deletion. The other shards' wait for an append of their own, or, when the deletion was
     * asked for (`asked`) and nothing is to be appended, go now, a call per shard at the same time:
     * under load deletions cost no call of their own, and when it is quiet they do not wait. What
     * Redis did not take goes to the buffer.
     */
    const appendBatch = (batch: ReadonlyArray<PendingAppend>, asked: boolean) =>
      Effect.suspend(() => {
        if (asked) state.deletionTaken()
        const stream = SHARDS[shard]!
        if (batch.length > 0) shard = (shard + 1) % Math.min(SHARDS.length, options.appendShards)
        const deletions = batch.length > 0 ? state.takeDeletions(stream) : asked ? state.takeDeletions() : []
        // Not connected: straight to the buffer (a command would only wait for the connection).
        if (store.isDown()) {
          state.giveBack(deletions)
          return toBuffer(batch)
        }
        const groups = Map.groupBy(deletions, (d) => d.stream)
        if (batch.length > 0 && !groups.has(stream)) groups.set(stream, [])
        const calls = [...groups].map(([to, group]) => call(to, to === stream ? batch : [], group))
        // Usually one call (no fiber forked for it).
        const done = calls.length === 1 ? Effect.map(calls[0]!, (one) => [one]) : Effect.all(calls, { concurrency: "unbounded" })
        return Effect.flatMap(done, (answers) => {
          // The entries left for other shards: asked for again, unless Redis refused (no busy loop
          // while it is away; they go with the next append to their shard, or the next request).
          if (batch.length > 0 && answers.every((a) => a.took) && state.askDeletion()) askDeletion()
          return toBuffer(answers.flatMap((a) => a.refused))
        })
      }).pipe(Effect.ensuring(Effect.sync(() => batch.forEach(({ waiter }) => release(waiter)))))

    const append = Effect.gen(function*() {
      // A run started again after the last one stopped mid-batch: that batch (in the stream or
      // not) goes to the buffer, stored once either way.
      if (appending.length > 0) yield* toBuffer(appending)
      appending = []
      const taken = yield* Queue.takeBetween(appends, 1, options.batchMax)
      // Records offered from now on wait under a deadline of their own.
      open = undefined
      appending = taken.filter((item): item is PendingAppend => item !== DELETE)
      yield* appendBatch(appending, appending.length < taken.length)
      appending = []
    })

    /** Closing (the fiber stopped): what waits goes to the in-process buffer (a record both there and in the stream is stored once). */
    const stop = Effect.gen(function*() {
      closed = true
      const left = [...appending, ...(yield* Queue.clear(appends))].filter((item): item is PendingAppend => item !== DELETE)
      appending = []
      yield* toBuffer(left)
    })

    const record = (entry: AuditEntry): Effect.Effect<void> => {
      // Not connected, or closing: straight to the buffer, so a Redis outage never slows requests,
      // and a count from before it never refuses a record the buffer can hold.
      if (closed || store.isDown()) return offer(newEntry(entry))
      if (state.full(options.streamMax)) return countDropped(1, "stream_full")
      return Effect.callback<void>((resume) => {
        // The request waits for its entry's append but never longer than REQUEST_WAIT_MS from the
        // first record of its batch: a Redis that accepts and does not answer must not slow
        // requests (docs/audit.md#guarantees); the record still goes to the stream or the buffer.
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

    return { run: Effect.forever(append), stop, record, askDeletion } as const
  })
