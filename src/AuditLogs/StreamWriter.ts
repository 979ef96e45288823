/**
 * The audit writer with Redis (docs/audit.md#guarantees). Redis Streams, sharded, are the records'
 * journal (its layout: Journal.ts, docs/audit.md#the-redis-journal), read back only when their
 * writer is gone. Four parts around one state (JournalState.ts, whose invariants are the
 * journal's argument, docs/architecture.md#the-audit-journal):
 * - the appender (Appender.ts): a request's record is appended, with the records of the moment,
 *   as one entry, to the next shard; the request waits for it at most 100 ms; what Redis does not
 *   take goes to the in-process buffer (Buffer.ts);
 * - the committer (Committer.ts): the appended records, held in memory, go to the inserter, and an
 *   entry is deleted once each of its records is in;
 * - the recovery scan (Recovery.ts): the entries nobody else writes;
 * - the shutdown, below: the buffer flushed, then the held records written, and what could not be
 *   made sure of in the journal (a failover may have lost its entry), all within one deadline.
 * The three fibers run under the Layer's scope and start again if one dies (Supervise.ts). Every
 * Redis command has a deadline: COMMAND_TIMEOUT_MS (Store/Redis.ts), the append 2 s.
 */
import { Effect, Fiber } from "effect"
import { randomUUID } from "node:crypto"
import { ShutdownDeadline } from "../Lifecycle.ts"
import { RedisClient } from "../Store/Redis.ts"
import { makeAppender } from "./Appender.ts"
import { makeBuffer } from "./Buffer.ts"
import { makeCommitter } from "./Committer.ts"
import { countDropped } from "./Dropped.ts"
import { type CountedStream, parseJournal } from "./Journal.ts"
import { type Append, type Deletion, type JournalStore, redisJournalStore } from "./JournalStore.ts"
import { JournalState } from "./JournalState.ts"
import { makeRecovery } from "./Recovery.ts"
import { supervised } from "./Supervise.ts"
import { defaultWriterOptions, flushBudgetMs, type WriterOptions } from "./WriterOptions.ts"

/**
 * The end of the shutdown budget kept for appending again what the drain could not write (a
 * quarter of the budget at most; Redis answers in well under 1 ms).
 */
const KEEP_MS = 500

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

    /** One script call; what Redis then says of the stream's size is kept for the cap, and every count forgotten when it fails. */
    const journal = (stream: CountedStream, append: Append | undefined, deletions: ReadonlyArray<Deletion>, timeoutMs?: number) =>
      store.journal(stream, append, deletions, timeoutMs).pipe(
        Effect.tapError(() => Effect.sync(() => state.unreachable())),
        Effect.map(({ held, id }) => {
          state.observed(stream, held)
          return id
        })
      )
    /** True when Redis took a deletion. An entry whose deletion fails is written again by a scan (stored once). */
    const deleted = <E>(deletion: Effect.Effect<unknown, E>) =>
      deletion.pipe(
        Effect.as(true),
        Effect.catch((error) => Effect.logWarning("Audit stream entries not deleted; a later scan writes them again (stored once)", error).pipe(Effect.as(false)))
      )
    /** Deletes entries whose records are in: one call per stream, at the same time (true: Redis took each). */
    const deleteNow = (deletions: ReadonlyArray<Deletion>) =>
      Effect.forEach(Map.groupBy(deletions, (d) => d.stream), ([stream, group]) => deleted(journal(stream, undefined, group)), { concurrency: "unbounded" }).pipe(
        Effect.map((done) => done.every(Boolean))
      )

    /**
     * The shutdown's last step, for the held records the drain could not write: each entry is
     * looked for (by its id and batch), and one a failover lost is appended again as a new entry,
     * so that the next instance's scan still finds its records. Those Redis can neither show nor
     * take again are counted.
     */
    const keep = (timeoutMs: number) => {
      const until = Date.now() + timeoutMs
      const inJournal = ({ batch, id, records, stream }: ReturnType<JournalState["unsettledEntries"]>[number]) =>
        store.isDown() ? Effect.succeed(false) : store.range(stream, id, id, 1, timeoutMs / 2).pipe(
          Effect.flatMap((raw) =>
            parseJournal(raw)[0]?.batch === batch
              ? Effect.succeed(true)
              : Effect.as(journal(stream, { records, batch: randomUUID() }, [], Math.max(1, until - Date.now())), true)
          ),
          Effect.orElseSucceed(() => false)
        )
      const entries = state.unsettledEntries()
      return Effect.forEach(entries, inJournal, { concurrency: "unbounded" }).pipe(
        Effect.flatMap((kept) => {
          const count = (wanted: boolean) => entries.reduce((n, e, i) => n + (kept[i] === wanted ? e.records.length : 0), 0)
          return Effect.andThen(
            countDropped(count(false), "shutdown"),
            count(true) === 0 ? Effect.void : Effect.logWarning("Audit records left in the stream at shutdown; the next instance writes them").pipe(
              Effect.annotateLogs({ left: count(true) })
            )
          )
        })
      )
    }

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
        // One deadline for all three (exit within 10 s in every state: docs/operations.md#shutdown).
        // The in-process buffer first: its records exist nowhere else (what it cannot write is
        // counted, reason `shutdown`). Then the appended records this instance holds; what does
        // not fit, or finds PostgreSQL away, stays in the journal for the next instance to start
        // (or any running one's scan) to write — made sure of first, since a failover may have
        // lost its entry (docs/audit.md#failover).
        const budget = flushBudgetMs(options, shutdown)
        const deadline = Date.now() + budget
        const keepMs = Math.min(KEEP_MS, budget / 4)
        yield* buffer.flush(Math.max(0, deadline - keepMs - Date.now()))
        const left = yield* committer.drain(Math.max(0, deadline - keepMs - Date.now()))
        if (left > 0) yield* keep(Math.max(keepMs, deadline - Date.now()))
      })
    )

    // `holds`: whether a record is in this writer's memory (what a failover that loses its entry
    // cannot lose: docs/audit.md#failover); the model tests ask it.
    return { record: appender.record, holds: (entryId: string) => state.holds(entryId) }
  })
