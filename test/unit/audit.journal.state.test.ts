/**
 * The journal's bookkeeping alone (src/AuditLogs/JournalState.ts,
 * docs/architecture.md#the-audit-journal), over random sequences of appends, batches taken and
 * settled — a batch settled twice (written again after an interruption), records settled out of
 * order (the shutdown drain), batches abandoned by a committer that died, entries of several
 * shards, two entries with one stream id (a failover issued it again), deletions taken by shard or
 * all at once: a record is settled once whatever settles it, an entry becomes deletable once and
 * only after its last record, its deletion names its shard, id and batch, what is held never
 * exceeds the bound, and the batch in flight is taken again until it is settled.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { AuditEntry, StoredEntry } from "../../src/AuditLogs/Entry.ts"
import type { ShardStream } from "../../src/AuditLogs/Journal.ts"
import { type Held, JournalState } from "../../src/AuditLogs/JournalState.ts"

const stored = (entryId: string): StoredEntry => ({ entryId, entry: {} as AuditEntry })

type Step =
  | { readonly kind: "admit"; readonly records: number; readonly shard: number; readonly sameId: boolean }
  | { readonly kind: "commit"; readonly twice: boolean }
  | { readonly kind: "abandon" }
  | { readonly kind: "drain"; readonly pick: ReadonlyArray<boolean> }
  | { readonly kind: "delete"; readonly fails: boolean; readonly shard: number | undefined }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant("admit" as const), records: fc.integer({ min: 1, max: 4 }), shard: fc.nat({ max: 2 }), sameId: fc.boolean() }),
  fc.record({ kind: fc.constant("commit" as const), twice: fc.boolean() }),
  fc.constant({ kind: "abandon" as const }),
  fc.record({ kind: fc.constant("drain" as const), pick: fc.array(fc.boolean(), { maxLength: 12 }) }),
  fc.record({ kind: fc.constant("delete" as const), fails: fc.boolean(), shard: fc.option(fc.nat({ max: 2 }), { nil: undefined }) })
)

const HELD_MAX = 8
const BATCH_MAX = 3

describe("audit journal bookkeeping", () => {
  it("a record is settled once; an entry is deletable once, after its last record; the bound holds; the batch in flight comes back", () => {
    fc.assert(fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
      const state = new JournalState(HELD_MAX)
      /** Each batch's records, shard and stream id. */
      const records = new Map<string, Array<string>>()
      const where = new Map<string, { stream: ShardStream; id: string }>()
      const settled = new Set<string>()
      const deleted = new Set<string>()
      let next = 0
      let inFlight: ReadonlyArray<Held> = []
      const settle = (batch: ReadonlyArray<Held>) => {
        state.settle(batch)
        for (const h of batch) settled.add(h.stored.entryId)
      }
      for (const s of steps) {
        if (s.kind === "admit") {
          const batch = `b${next++}`
          const stream: ShardStream = `s${s.shard}`
          // The same stream id as the last entry of that shard: a failover issued it again.
          const id = s.sameId ? [...where.values()].findLast((w) => w.stream === stream)?.id ?? `${next}-0` : `${next}-0`
          const ids = Array.from({ length: s.records }, (_, i) => `${batch}.${i}`)
          const fits = state.held + s.records <= HELD_MAX
          expect(state.admit(stream, id, batch, ids.map(stored))).toBe(fits)
          if (fits) {
            records.set(batch, ids)
            where.set(batch, { stream, id })
          }
        } else if (s.kind === "commit") {
          const batch = state.batch(BATCH_MAX)
          // What a committer took and did not settle comes back first.
          expect(batch.slice(0, inFlight.length)).toEqual(inFlight)
          settle(batch)
          if (s.twice) settle(batch)
          inFlight = []
        } else if (s.kind === "abandon") {
          inFlight = state.batch(BATCH_MAX)
        } else if (s.kind === "drain") {
          const left = state.unsettled()
          settle(left.filter((_, i) => s.pick[i] === true))
          inFlight = inFlight.filter((h) => !settled.has(h.stored.entryId))
        } else {
          const taken = state.takeDeletions(s.shard === undefined ? undefined : `s${s.shard}`)
          if (s.shard !== undefined) expect(taken.every((d) => d.stream === `s${s.shard}`)).toBe(true)
          if (s.fails) state.giveBack(taken)
          else {
            for (const { batch, id, stream } of taken) {
              expect(deleted.has(batch), `${batch} deletable twice`).toBe(false)
              expect(records.get(batch)!.every((r) => settled.has(r)), `${batch} deletable before all its records`).toBe(true)
              expect({ stream, id }).toEqual(where.get(batch))
              deleted.add(batch)
            }
          }
        }
        const pending = [...records.values()].flat().filter((r) => !settled.has(r))
        expect(state.held).toBe(pending.length)
        expect(state.held).toBeLessThanOrEqual(HELD_MAX)
        expect(state.unsettled().map((h) => h.stored.entryId).sort()).toEqual(pending.sort())
      }
      // Every entry whose records all settled is deleted or waiting for deletion, once.
      for (const { batch } of state.takeDeletions()) deleted.add(batch)
      for (const [batch, ids] of records) expect(deleted.has(batch)).toBe(ids.every((r) => settled.has(r)))
    }), { numRuns: 2000 })
  })

  it("the shards' counts refuse records only while Redis vouches for them (unknown after a failure), added up against the cap", () => {
    const state = new JournalState(HELD_MAX)
    expect(state.full(10)).toBe(false)
    state.observed("s0", 10)
    expect(state.full(10)).toBe(true)
    state.unreachable()
    expect(state.full(10)).toBe(false)
    state.observed("s0", 4)
    state.observed("s1", 5)
    expect(state.full(10)).toBe(false)
    state.observed("s2", 1)
    expect(state.full(10)).toBe(true)
    // A shard's newer count replaces its older one; a reply without one forgets it.
    state.observed("s1", 0)
    expect(state.full(10)).toBe(false)
    state.observed("s1", 5)
    state.observed("s2", undefined)
    expect(state.full(10)).toBe(false)
  })
})
