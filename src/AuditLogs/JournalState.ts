/**
 * The audit journal's bookkeeping (docs/architecture.md#the-audit-journal): what this writer
 * appended to the v2 stream and still holds in memory, which of its entries may be deleted, and
 * how full the stream is. The appender, the committer, the recovery scan and the shutdown drain
 * (StreamWriter.ts) share this state and nothing else; each change is one synchronous step, so
 * none of them sees it half done, and a fiber that dies or is interrupted leaves it whole.
 *
 * Its invariants:
 * - a tracked entry's pending set is exactly its records not settled yet; settling a record
 *   takes it out of its set once, whatever settles it (the committer, the shutdown drain, a batch
 *   written again after an interruption): settling again changes nothing;
 * - an entry becomes deletable once, when its last record is settled — never before, so an entry
 *   is deleted only after all its records are in PostgreSQL (or counted as dropped);
 * - the records held (waiting or in the batch in flight) are the pending ones, at most `heldMax`:
 *   an entry is held whole or not at all (then it waits in the stream for a recovery scan);
 * - `backlog` is the stream's record count as Redis last answered it, and unknown once a command
 *   failed: a figure from before an outage never refuses records (docs/audit.md#guarantees).
 */
import { Latch } from "effect"
import type { StoredEntry } from "./Entry.ts"
import type { Deletion } from "./JournalStore.ts"

/** A record appended in entry `entry` (its stream id), held in memory on its way to the inserter. */
export interface Held {
  readonly entry: string
  readonly stored: StoredEntry
}

interface Tracked {
  /** The record count it was appended with (for the stream's total when it is deleted). */
  readonly records: number
  /** The entry ids of its records not settled yet. */
  readonly pending: Set<string>
}

export class JournalState {
  private readonly heldMax: number
  private readonly tracked = new Map<string, Tracked>()
  private pendingRecords = 0
  /** Held records not taken yet, oldest first. */
  private waiting: Array<Held> = []
  /** The batch taken and not settled yet: a committer that died or was interrupted left it here. */
  private inFlight: Array<Held> = []
  private deletable: Array<Deletion> = []
  private deletionAsked = false
  private backlog: number | undefined = undefined
  /** Open while records wait (the committer waits on it otherwise). */
  private readonly arrived = Latch.makeUnsafe(false)

  constructor(heldMax: number) {
    this.heldMax = heldMax
  }

  /**
   * An entry Redis took: held whole (its records go on to the inserter) when they fit under
   * `heldMax`, else left in the stream for a recovery scan (false).
   */
  admit(id: string, records: ReadonlyArray<StoredEntry>): boolean {
    if (records.length === 0 || this.pendingRecords + records.length > this.heldMax) return false
    this.tracked.set(id, { records: records.length, pending: new Set(records.map((r) => r.entryId)) })
    this.pendingRecords += records.length
    for (const stored of records) this.waiting.push({ entry: id, stored })
    this.arrived.openUnsafe()
    return true
  }

  private isPending = (held: Held) => this.tracked.get(held.entry)?.pending.has(held.stored.entryId) === true

  /**
   * The batch to write: the one in flight, topped up to `max` with waiting records (so a committer
   * started again after dying takes its batch first). Empty: nothing to write.
   */
  batch(max: number): ReadonlyArray<Held> {
    const room = max - this.inFlight.length
    if (room > 0) for (const next of this.waiting.splice(0, room)) if (this.isPending(next)) this.inFlight.push(next)
    if (this.waiting.length === 0) this.arrived.closeUnsafe()
    return [...this.inFlight]
  }

  /** Until a record waits. */
  readonly whenHeld = this.arrived.await

  /**
   * These records are in PostgreSQL (or counted as dropped). Each is settled once: a record
   * settled already changes nothing. Answers whether an entry became deletable.
   */
  settle(records: ReadonlyArray<Held>): boolean {
    const before = this.deletable.length
    for (const { entry, stored } of records) {
      const tracked = this.tracked.get(entry)
      if (tracked === undefined || !tracked.pending.delete(stored.entryId)) continue
      this.pendingRecords--
      if (tracked.pending.size === 0) {
        this.tracked.delete(entry)
        this.deletable.push({ id: entry, records: tracked.records })
      }
    }
    this.inFlight = this.inFlight.filter(this.isPending)
    return this.deletable.length > before
  }

  /** Every held record not settled (for the shutdown drain), the batch in flight first. */
  unsettled(): ReadonlyArray<Held> {
    return [...this.inFlight, ...this.waiting].filter(this.isPending)
  }

  /** How many records are held and not settled. */
  get held(): number {
    return this.pendingRecords
  }

  /** Asks for the deletion of the deletable entries once (true: not asked yet since the last take). */
  askDeletion(): boolean {
    if (this.deletionAsked || this.deletable.length === 0) return false
    this.deletionAsked = true
    return true
  }

  /** The entries to delete now; whoever takes them gives back those it could not delete. */
  takeDeletions(): ReadonlyArray<Deletion> {
    const taken = this.deletable
    this.deletable = []
    this.deletionAsked = false
    return taken
  }

  /** Deletions that did not reach Redis: they go with the next call (an id deleted twice deletes nothing, and counts nothing, twice). */
  giveBack(deletions: ReadonlyArray<Deletion>): void {
    if (deletions.length > 0) this.deletable = [...deletions, ...this.deletable]
  }

  /** Redis answered with the stream's record count (undefined: it did not say). */
  observed(records: number | undefined): void {
    this.backlog = records
  }

  /** A command failed: the stream's count is unknown until Redis answers again. */
  unreachable(): void {
    this.backlog = undefined
  }

  /** Whether the stream holds `max` records or more, as Redis last said. */
  full(max: number): boolean {
    return this.backlog !== undefined && this.backlog >= max
  }
}
