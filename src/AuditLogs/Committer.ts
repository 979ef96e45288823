/**
 * The journal's committer (docs/audit.md#the-redis-journal): the records the appender held in
 * memory go to the batch inserter, and once each of an entry's records is in, the entry may be
 * deleted from the stream (JournalState.ts settles each record once). Nothing reads the stream back
 * on this path: the process already holds what it appended.
 */
import { Duration, Effect } from "effect"
import type { StoredEntry } from "./Entry.ts"
import type { Deletion } from "./JournalStore.ts"
import type { JournalState } from "./JournalState.ts"
import type { WriterOptions } from "./WriterOptions.ts"

export interface CommitterDeps {
  readonly state: JournalState
  readonly insert: (batch: ReadonlyArray<StoredEntry>) => Effect.Effect<void>
  /** Deletes entries now (true: Redis took it). */
  readonly deleteNow: (deletions: ReadonlyArray<Deletion>) => Effect.Effect<boolean>
  /** Asks the appender to carry the deletable entries' deletion (with its next append, or alone). */
  readonly askDeletion: () => void
  readonly options: WriterOptions
}

export const makeCommitter = ({ askDeletion, deleteNow, insert, options, state }: CommitterDeps) => {
  const max = options.batchMax
  const lingerMs = Duration.toMillis(Duration.fromInputUnsafe(options.commitLinger))

  /** Inserts a batch and settles its records; a deletion is asked for the entries that are then complete. */
  const commit = Effect.gen(function*() {
    let batch = state.batch(max)
    if (batch.length === 0) return yield* state.whenHeld
    // A short wait lets the records of the next moments join the batch: one INSERT (and one
    // deletion) for many records instead of one per few. The records are in the stream already,
    // so nothing waits on this but their visibility in the database.
    if (batch.length < max && lingerMs > 0) {
      yield* Effect.sleep(lingerMs)
      batch = state.batch(max)
    }
    yield* insert(batch.map((h) => h.stored))
    if (state.settle(batch) && state.askDeletion()) askDeletion()
  })

  /**
   * At shutdown (the loop stopped): every held record not settled yet, the batch in flight first
   * (it may be written twice: stored once), each batch's complete entries deleted after it.
   * Answers how many records it did not write (the deadline cut them).
   */
  const drain = (timeoutMs: number) =>
    Effect.gen(function*() {
      const left = state.unsettled()
      yield* deleteNow(state.takeDeletions())
      for (let i = 0; i < left.length; i += max) {
        const batch = left.slice(i, i + max)
        yield* insert(batch.map((h) => h.stored))
        state.settle(batch)
        yield* deleteNow(state.takeDeletions())
      }
    }).pipe(Effect.timeoutOption(timeoutMs), Effect.map(() => state.held))

  return { run: Effect.forever(commit), drain } as const
}
