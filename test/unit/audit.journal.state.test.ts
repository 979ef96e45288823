/**
 * The journal's bookkeeping alone (src/AuditLogs/JournalState.ts,
 * docs/architecture.md#the-audit-journal), over random sequences of appends, batches taken and
 * settled — a batch settled twice (written again after an interruption), records settled out of
 * order (the shutdown drain), batches abandoned by a committer that died: a record is settled once
 * whatever settles it, an entry becomes deletable once and only after its last record, what is held
 * never exceeds the bound, and the batch in flight is taken again until it is settled.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { AuditEntry, StoredEntry } from "../../src/AuditLogs/Entry.ts"
import { type Held, JournalState } from "../../src/AuditLogs/JournalState.ts"

const stored = (entryId: string): StoredEntry => ({ entryId, entry: {} as AuditEntry })

type Step =
  | { readonly kind: "admit"; readonly records: number }
  | { readonly kind: "commit"; readonly twice: boolean }
  | { readonly kind: "abandon" }
  | { readonly kind: "drain"; readonly pick: ReadonlyArray<boolean> }
  | { readonly kind: "delete"; readonly fails: boolean }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant("admit" as const), records: fc.integer({ min: 1, max: 4 }) }),
  fc.record({ kind: fc.constant("commit" as const), twice: fc.boolean() }),
  fc.constant({ kind: "abandon" as const }),
  fc.record({ kind: fc.constant("drain" as const), pick: fc.array(fc.boolean(), { maxLength: 12 }) }),
  fc.record({ kind: fc.constant("delete" as const), fails: fc.boolean() })
)

const HELD_MAX = 8
const BATCH_MAX = 3

describe("audit journal bookkeeping", () => {
  it("a record is settled once; an entry is deletable once, after its last record; the bound holds; the batch in flight comes back", () => {
    fc.assert(fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
      const state = new JournalState(HELD_MAX)
      const records = new Map<string, Array<string>>()
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
          const id = `e${next++}`
          const ids = Array.from({ length: s.records }, (_, i) => `${id}.${i}`)
          const fits = state.held + s.records <= HELD_MAX
          expect(state.admit(id, ids.map(stored))).toBe(fits)
          if (fits) records.set(id, ids)
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
          const taken = state.takeDeletions()
          if (s.fails) state.giveBack(taken)
          else {
            for (const { id, records: n } of taken) {
              expect(deleted.has(id), `${id} deletable twice`).toBe(false)
              expect(records.get(id)!.every((r) => settled.has(r)), `${id} deletable before all its records`).toBe(true)
              expect(n).toBe(records.get(id)!.length)
              deleted.add(id)
            }
          }
        }
        const pending = [...records.values()].flat().filter((r) => !settled.has(r))
        expect(state.held).toBe(pending.length)
        expect(state.held).toBeLessThanOrEqual(HELD_MAX)
        expect(state.unsettled().map((h) => h.stored.entryId).sort()).toEqual(pending.sort())
      }
      // Every entry whose records all settled is deleted or waiting for deletion, once.
      for (const { id } of state.takeDeletions()) deleted.add(id)
      for (const [id, ids] of records) expect(deleted.has(id)).toBe(ids.every((r) => settled.has(r)))
    }), { numRuns: 2000 })
  })

  it("the stream's count refuses records only while Redis vouches for it: unknown after a failure", () => {
    const state = new JournalState(HELD_MAX)
    expect(state.full(10)).toBe(false)
    state.observed(10)
    expect(state.full(10)).toBe(true)
    state.unreachable()
    expect(state.full(10)).toBe(false)
    state.observed(9)
    expect(state.full(10)).toBe(false)
  })
})
