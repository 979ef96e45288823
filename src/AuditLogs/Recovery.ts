/**
 * The journal's recovery scan (docs/audit.md#the-redis-journal): the entries nobody else will
 * write — a killed instance's, also a restarted one's own, those the memory bound left out — are
 * read back, written and deleted. At start, everything already in the streams; then, every
 * `claimIdle / 2`, the entries older than `claimIdle`. Every stream is read: the 16 v3 shards, and
 * v2 and v1, which instances that write them still write during a rolling update from them (not in
 * a Redis Cluster: JournalStore `streams`). A record written twice (by its writer and by a scan)
 * is stored once: the insert is idempotent by `entry_id`. An entry is deleted only if it is still
 * the one the scan read (its batch id: Journal.ts JOURNAL_LUA).
 *
 * An entry that cannot be read is counted (`audit_records_dropped_total{reason="unreadable"}`,
 * the records it says it held) and logged with its id before it is deleted: it never stops the
 * scan, nor goes silently.
 */
import { Duration, Effect, Option } from "effect"
import { countDropped } from "./Dropped.ts"
import type { StoredEntry } from "./Entry.ts"
import { type JournalEntry, type JournalStream, parseJournal } from "./Journal.ts"
import type { Deletion, JournalStore } from "./JournalStore.ts"
import type { WriterOptions } from "./WriterOptions.ts"

/** About how many batches a scan reads at once (a v3 or v2 entry holds up to a batch). */
const SCAN_PAGE_BATCHES = 10

export interface RecoveryDeps {
  readonly store: JournalStore
  readonly insert: (batch: ReadonlyArray<StoredEntry>) => Effect.Effect<void>
  /** Deletes v3 and v2 entries (true: Redis took it). */
  readonly deleteNow: (deletions: ReadonlyArray<Deletion>) => Effect.Effect<boolean>
  /** Deletes v1 entries (true: Redis took it). */
  readonly deleteV1: (ids: ReadonlyArray<string>) => Effect.Effect<boolean>
  readonly options: WriterOptions
}

export const makeRecovery = ({ deleteNow, deleteV1, insert, options, store }: RecoveryDeps) =>
  Effect.gen(function*() {
    const max = options.batchMax
    const pageRecords = SCAN_PAGE_BATCHES * max
    const claimIdleMs = Duration.toMillis(Duration.fromInputUnsafe(options.claimIdle))
    /** Unreadable entries counted and not yet deleted: a deletion that failed does not count them twice. */
    const counted = new Set<string>()

    const countUnreadable = (stream: JournalStream, page: ReadonlyArray<JournalEntry>) =>
      Effect.forEach(page, (entry) => {
        const key = `${stream} ${entry.id}`
        if (entry.unreadable === 0 || counted.has(key)) return Effect.void
        counted.add(key)
        return countDropped(entry.unreadable, "unreadable", undefined, { entry: entry.id, stream })
      }, { discard: true })

    const deletePage = (stream: JournalStream, page: ReadonlyArray<JournalEntry>) =>
      (stream === "v1" ? deleteV1(page.map((e) => e.id)) : deleteNow(page.map(({ batch, id }) => ({ stream, id, batch })))).pipe(
        Effect.tap((deleted) => Effect.sync(() => deleted && page.forEach((e) => counted.delete(`${stream} ${e.id}`))))
      )

    /**
     * Writes the entries of one stream up to `end` (an entry id or ms), a page at a time, each page
     * after the last, then deletes them (an entry only once all its records committed, or were
     * counted). `perEntry`: the most records an entry of that stream holds, for the first page's size.
     */
    const scan = (stream: JournalStream, end: string, perEntry: number) =>
      Effect.gen(function*() {
        let start = "-"
        let count = Math.max(1, Math.floor(pageRecords / perEntry))
        while (true) {
          if (store.isDown()) return yield* Effect.fail(new Error("Redis unreachable"))
          const page = parseJournal(yield* store.range(stream, start, end, count))
          // Counted, then deleted at once when none of its records can be read (not after the
          // page's inserts, which may wait out a PostgreSQL outage across a restart).
          yield* countUnreadable(stream, page)
          const unreadable = page.filter((e) => e.records.length === 0)
          const readable = page.filter((e) => e.records.length > 0)
          if (unreadable.length > 0) yield* deletePage(stream, unreadable)
          const records = readable.flatMap((e) => e.records)
          for (let i = 0; i < records.length; i += max) yield* insert(records.slice(i, i + max))
          if (readable.length > 0) yield* deletePage(stream, readable)
          if (page.length < count) return
          start = `(${page[page.length - 1]!.id}`
          count = Math.min(max, Math.max(1, Math.floor(pageRecords * page.length / Math.max(1, records.length))))
        }
      })

    /** Every stream up to its end (null: nothing to read). */
    const scanAll = (ends: ReadonlyArray<string | null>) =>
      Effect.forEach(store.streams, (stream, i) => {
        const end = ends[i] ?? null
        return end === null ? Effect.void : scan(stream, end, stream === "v1" ? 1 : max)
      }, { discard: true })

    // At start everything already in the streams (a previous run's entries), up to each one's last
    // entry before this writer appends anything, so that the scan does not write this writer's own
    // records again while their batch lingers (null: the stream was empty; unknown when Redis did
    // not answer, and then up to Redis's clock when the scan runs).
    const startEnds = yield* Effect.all(store.streams.map((stream) => store.lastId(stream)), { concurrency: "unbounded" }).pipe(Effect.option)
    let started = false
    /** A scan failed and none got through since: the failure was said. */
    let failing = false
    const recover = Effect.gen(function*() {
      if (!started) {
        if (Option.isSome(startEnds)) yield* scanAll(startEnds.value)
        else {
          const end = String(yield* store.now)
          yield* scanAll(store.streams.map(() => end))
        }
        started = true
        failing = false
      }
      while (true) {
        yield* Effect.sleep(claimIdleMs / 2)
        const end = String((yield* store.now) - claimIdleMs)
        yield* scanAll(store.streams.map(() => end))
        failing = false
      }
    })

    /**
     * Runs for good: a scan that fails (Redis away) is retried a second later, said once until a
     * scan gets through again (the outage itself is the outage tracker's line, docs/operations.md#outages).
     */
    const run = recover.pipe(
      Effect.catch((error) =>
        (failing ? Effect.void : Effect.logWarning("Audit stream recovery scan failed; retrying", error)).pipe(
          Effect.andThen(Effect.sync(() => {
            failing = true
          })),
          Effect.andThen(Effect.sleep("1 second"))
        )
      ),
      Effect.forever
    )
    return { run } as const
  })
