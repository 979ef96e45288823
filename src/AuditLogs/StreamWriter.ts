/**
 * The audit writer with Redis (docs/audit.md#guarantees). The Redis Stream is the records' journal
 * (its layout: Journal.ts, docs/audit.md#the-redis-journal), read back only when its writer is
 * gone. Four parts around one state (JournalState.ts, whose invariants are the journal's argument,
 * docs/architecture.md#the-audit-journal):
 * - the appender (Appender.ts): a request's record is appended, with the records of the moment,
 *   as one entry; the request waits for it at most 100 ms; what Redis does not take goes to the
 *   in-process buffer (Buffer.ts);
 * - the committer (Committer.ts): the appended records, held in memory, go to the inserter, and an
 *   entry is deleted once each of its records is in;
 * - the recovery scan (Recovery.ts): the entries nobody else writes;
 * - the shutdown, below: the buffer flushed, then the held records written, within one deadline.
 * The three fibers run under the Layer's scope and start again if one dies (Supervise.ts). Every
 * Redis command has a deadline: COMMAND_TIMEOUT_MS (Store/Redis.ts), the append 2 s.
 */
import { Effect, Fiber } from "effect"
import { ShutdownDeadline } from "../Lifecycle.ts"
import { RedisClient } from "../Store/Redis.ts"
import { makeAppender } from "./Appender.ts"
import { makeBuffer } from "./Buffer.ts"
import { makeCommitter } from "./Committer.ts"
import type { StoredEntry } from "./Entry.ts"
import { type Deletion, type JournalStore, redisJournalStore } from "./JournalStore.ts"
import { JournalState } from "./JournalState.ts"
import { makeRecovery } from "./Recovery.ts"
import { supervised } from "./Supervise.ts"
import { defaultWriterOptions, flushBudgetMs, type WriterOptions } from "./WriterOptions.ts"

export const makeStreamAuditLog = (options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    return yield* makeJournalWriter(redisJournalStore(yield* RedisClient), options)
  })

/** The writer over any JournalStore (Redis in production; a model of it in tests). */
export const makeJournalWriter = (store: JournalStore, options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    const buffer = yield* makeBuffer(options)
    const shutdown = yield* ShutdownDeadline
    const state = new JournalState(options.streamHeldMax)

    /** One script call; what Redis then says of the stream's size is kept for its cap, and forgotten when it fails. */
    const journal = (records: ReadonlyArray<StoredEntry>, deletions: ReadonlyArray<Deletion>, timeoutMs?: number) =>
      store.journal(records, deletions, timeoutMs).pipe(
        Effect.tapError(() => Effect.sync(() => state.unreachable())),
        Effect.map(({ held, id }) => {
          state.observed(held)
          return id
        })
      )
    /** True when Redis took a deletion. An entry whose deletion fails is written again by a scan (stored once). */
    const deleted = <E>(deletion: Effect.Effect<unknown, E>) =>
      deletion.pipe(
        Effect.as(true),
        Effect.catch((error) => Effect.logWarning("Audit stream entries not deleted; a later scan writes them again (stored once)", error).pipe(Effect.as(false)))
      )
    /** Deletes v2 entries whose records are in. */
    const deleteNow = (deletions: ReadonlyArray<Deletion>) => deletions.length === 0 ? Effect.succeed(true) : deleted(journal([], deletions))

    const appender = yield* makeAppender({ state, store, journal, offer: buffer.offer, options })
    const committer = makeCommitter({ state, insert: buffer.insert, deleteNow, askDeletion: appender.askDeletion, options })
    const recovery = yield* makeRecovery({ store, insert: buffer.insert, deleteNow, deleteV1: (ids) => deleted(store.deleteV1(ids)), options })
    const appending = yield* supervised("journal appender", appender.run)
    const committing = yield* supervised("journal committer", committer.run)
    const recovering = yield* supervised("journal recovery scan", recovery.run)

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Fiber.interrupt(appending)
        yield* appender.stop
        yield* Fiber.interrupt(recovering)
        yield* Fiber.interrupt(committing)
        // One deadline for both (exit within 10 s in every state: docs/operations.md#shutdown). The in-process
        // buffer first: its records exist nowhere else (what it cannot write is counted, reason
        // `shutdown`). Then the appended records this instance holds; what does not fit, or finds
        // Redis or PostgreSQL away, stays in the stream, where the next instance to start (or any
        // running one's scan) writes it.
        const deadline = Date.now() + flushBudgetMs(options, shutdown)
        yield* buffer.flush(Math.max(0, deadline - Date.now()))
        const left = yield* committer.drain(Math.max(0, deadline - Date.now()))
        if (left > 0) yield* Effect.logWarning("Audit records left in the stream at shutdown; the next instance writes them").pipe(Effect.annotateLogs({ left }))
      })
    )

    return { record: appender.record }
  })
