/**
 * The audit journal's bookkeeping (docs/architecture.md#the-audit-journal): what this writer
 * appended to the v3 shards and still holds in memory, which of its entries may be deleted, and
 * how full the journal is. The appender, the committer, the recovery scan and the shutdown drain
 * (StreamWriter.ts) share this state and nothing else; each change is one synchronous step, so
 * none of them sees it half done, and a fiber that dies or is interrupted leaves it whole.
 *
 * Its invariants:
 * - an entry is known by its batch id (unique, also when a failover makes Redis issue a stream id
 *   twice); a tracked entry's pending set is exactly its records not settled yet; settling a
 *   record takes it out of its set once, whatever settles it (the committer, the shutdown drain, a
 *   batch written again after an interruption): settling again changes nothing;
 * - an entry becomes deletable once, when its last record is settled — never before, so an entry
 *   is deleted only after all its records are in PostgreSQL (or counted as dropped); its deletion
 *   names its batch id, so that only that entry is deleted (Journal.ts JOURNAL_LUA);
 * - the records held (waiting or in the batch in flight) are the pending ones, at most `heldMax`:
 *   an entry is held whole or not at all (then it waits in the stream for a recovery scan);
 * - a shard's count is its record count as Redis last answered it, and every count is unknown
 *   once a command failed: a figure from before an outage never refuses records
 *   (docs/audit.md#guarantees). The journal is full when the counts known add up to the cap.
 */
import { Latch } from "effect"
import type { StoredEntry } from "./Entry.ts"
import type { CountedStream, ShardStream } from "./Journal.ts"
import type { Deletion } from "./JournalStore.ts"

/** A record appended in the entry of batch `entry`, held in memory on its way to the inserter. */
export interface Held {
  readonly entry: string
  readonly stored: StoredEntry
}

interface Tracked {
  readonly stream: ShardStream
  /** Its stream id. */
  readonly id: string
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
  private deletable: Array<Deletion<ShardStream>> = []
  private deletionAsked = false
  /** Each stream's record count (the shards', and v2's as scans delete from it), as Redis last answered it. */
  private readonly counts = new Map<CountedStream, number>()
  /** Open while records wait (the committer waits on it otherwise). */
  private readonly arrived = Latch.makeUnsafe(false)

  constructor(heldMax: number) {
    this.heldMax = heldMax
  }

  /**
   * An entry Redis took (`id` in `stream`, of batch `batch`): held whole (its records go on to the
   * inserter) when they fit under `heldMax`, else left in the stream for a recovery scan (false).
   */
  admit(stream: ShardStream, id: string, batch: string, records: ReadonlyArray<StoredEntry>): boolean {
    if (records.length === 0 || this.pendingRecords + records.length > this.heldMax) return false
    this.tracked.set(batch, { stream, id, pending: new Set(records.map((r) => r.entryId)) })
    this.pendingRecords += records.length
    for (const stored of records) this.waiting.push({ entry: batch, stored })
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
        this.deletable.push({ stream: tracked.stream, id: tracked.id, batch: entry })
      }
    }
    this.inFlight = this.inFlight.filter(this.isPending)
    return this.deletable.length > before
  }

  /** Every held record not settled (for the shutdown drain), the batch in flight first. */
  unsettled(): ReadonlyArray<Held> {
    return [...this.inFlight, ...this.waiting].filter(this.isPending)
  }

  /** Whether the record `entryId` is held: appended by this writer, in memory, not settled yet. */
  holds(entryId: string): boolean {
    for (const { pending } of this.tracked.values()) if (pending.has(entryId)) return true
    return false
  }

  /** The entries with records not settled, with those records (what the shutdown could not write). */
  unsettledEntries(): Array<{ readonly stream: ShardStream; readonly id: string; readonly batch: string; readonly records: ReadonlyArray<StoredEntry> }> {
    return [...Map.groupBy(this.unsettled(), (h) => h.entry)].flatMap(([batch, held]) => {
      const tracked = this.tracked.get(batch)
      return tracked === undefined ? [] : [{ stream: tracked.stream, id: tracked.id, batch, records: held.map((h) => h.stored) }]
    })
  }

  /** How many records are held and not settled. */
  get held(): number {
    return this.pendingRecords
  }

  /** Asks for the deletion of the deletable entries (true: entries wait, and no request for it is pending). */
  askDeletion(): boolean {
    if (this.deletionAsked || this.deletable.length === 0) return false
    this.deletionAsked = true
    return true
  }

  /** The request for deletion was taken up: the next `askDeletion` asks again. */
  deletionTaken(): void {
    this.deletionAsked = false
  }

  /**
   * The entries to delete now: all of them, or those of `stream` (which an append to it carries).
   * Whoever takes them gives back those it could not delete.
   */
  takeDeletions(stream?: ShardStream): ReadonlyArray<Deletion<ShardStream>> {
    const taken = stream === undefined ? this.deletable : this.deletable.filter((d) => d.stream === stream)
    if (taken.length > 0) this.deletable = stream === undefined ? [] : this.deletable.filter((d) => d.stream !== stream)
    return taken
  }

  /** Deletions that did not reach Redis: they go with the next call (an id deleted twice deletes nothing, and counts nothing, twice). */
  giveBack(deletions: ReadonlyArray<Deletion<ShardStream>>): void {
    if (deletions.length > 0) this.deletable = [...deletions, ...this.deletable]
  }

  /** Redis answered with a stream's record count (undefined: it did not say). */
  observed(stream: CountedStream, records: number | undefined): void {
    if (records === undefined) this.counts.delete(stream)
    else this.counts.set(stream, records)
  }

  /** A command failed: every count is unknown until Redis answers again. */
  unreachable(): void {
    this.counts.clear()
  }

  /** Whether the shards hold `max` records or more together, as Redis last said of each. */
  full(max: number): boolean {
    let total = 0
    for (const n of this.counts.values()) total += n
    return total >= max
  }
}
