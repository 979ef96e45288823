/**
 * The audit journal's invariants (docs/architecture.md#the-audit-journal), checked over random
 * interleavings: the real writer (src/AuditLogs/StreamWriter.ts) over an in-memory Redis holding
 * every layout's streams (the 16 v3 shards, v2, v1) with JOURNAL_LUA's semantics and an in-memory
 * PostgreSQL, on fake timers (test/support/JournalWorld.ts), so each run is a reproducible sequence
 * of requests, faults (Redis slow, silent or refusing; a failover to a replica that lagged, on one
 * shard or all of them, whose clock is behind, so that it issues the lost entries' ids again;
 * PostgreSQL slow, down, losing its answers, dying or refusing on a record; entries nobody can
 * read), time passing, shutdowns and kills at any step — also right after a commit, before the
 * writer's next step. After each run:
 * - every answered request's record is stored exactly once, or counted as dropped with a reason,
 *   or was only in memory when its process was killed (what docs/audit.md#guarantees says a crash
 *   can lose — with a failover, also an entry the replica never received); with Redis answering,
 *   an answered request's record is in the stream or stored;
 * - an entry leaves the stream only once each of its records is stored or counted (also when its
 *   id was issued before to an entry that a failover lost), and one that cannot be read is counted
 *   (`unreadable`) and logged with its id first;
 * - no record is counted `stream_full` while Redis is unreachable;
 * - a request waits at most 100 ms for its record;
 * - once everything is back, the streams are empty.
 */
import fc from "fast-check"
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest"
import type { JournalStream } from "../../src/AuditLogs/Journal.ts"
import { defaultWriterOptions, type WriterOptions } from "../../src/AuditLogs/WriterOptions.ts"
import type { DatabaseMode, RedisMode } from "../support/JournalModel.ts"
import { type Action, type When, World } from "../support/JournalWorld.ts"

/**
 * Small bounds, so that runs of a few dozen records reach them: entries split across batches, a
 * full stream, a full buffer; appends to two shards, so that a failover's reissued ids meet the
 * writer's own entries.
 */
const options: WriterOptions = { ...defaultWriterOptions, batchMax: 3, streamMax: 12, streamHeldMax: 6, bufferMax: 8, appendShards: 2 }

const when: fc.Arbitrary<When> = fc.record({ after: fc.constantFrom(0, 1, 10, 150, 500), commits: fc.constantFrom(0, 0, 1, 2, 3) })

const requests = (poison: fc.Arbitrary<"dies" | "refuses" | undefined>) =>
  fc.record({ kind: fc.constant("requests" as const), n: fc.integer({ min: 1, max: 5 }), poison })

const time = fc.record({ kind: fc.constant("time" as const), ms: fc.constantFrom(0, 1, 2, 5, 12, 60, 101, 160, 1100, 2100, 16_000, 31_000) })
const redis = fc.record({ kind: fc.constant("redis" as const), mode: fc.constantFrom<RedisMode>("up", "up", "slow", "silent", "refusing") })

const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 6, arbitrary: requests(fc.constantFrom(undefined, undefined, undefined, undefined, "dies" as const, "refuses" as const)) },
  { weight: 5, arbitrary: time },
  { weight: 2, arbitrary: redis },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant("database" as const), mode: fc.constantFrom<DatabaseMode>("up", "up", "instant", "slow", "down", "lost") })
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("foreign" as const),
      stream: fc.constantFrom<JournalStream>("v1", "v2", "s0", "s9"),
      records: fc.integer({ min: 1, max: 3 }),
      readable: fc.boolean()
    })
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("rollback" as const),
      stream: fc.constantFrom<JournalStream | "all">("all", "s0", "s1", "v2"),
      steps: fc.integer({ min: 1, max: 4 })
    })
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("shutdown" as const), when }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("kill" as const), when }) }
)

const holds = async (actions: ReadonlyArray<Action>, setUp: (world: World) => void = () => {}) => {
  const world = new World(options)
  setUp(world)
  await world.run(actions)
  expect(world.check()).toEqual([])
}

const request = { kind: "requests", n: 1, poison: undefined } as const

describe("audit journal model", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setImmediate", "clearImmediate", "setInterval", "clearInterval", "Date"] })
  })
  afterEach(() => {
    vi.useRealTimers()
  })

  it("every answered request's record is stored once or counted; an entry leaves the stream only once its records are in; a kill loses only what was in memory", async () => {
    await fc.assert(fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 30 }), (actions) => holds(actions)), {
      numRuns: 600,
      examples: [
        // An entry nobody can read, in either layout: counted and logged with its id, then deleted.
        [[{ kind: "foreign", stream: "v1", records: 1, readable: false }]],
        [[{ kind: "foreign", stream: "v2", records: 3, readable: false }, request]],
        // A record the inserter dies on: counted as refused; the writer, its shutdown and the next start scan go on.
        [[{ kind: "requests", n: 1, poison: "dies" }, request, { kind: "time", ms: 0 }]],
        // …also when the next instance's start scan meets it: the entries behind it are still written.
        [[
          { kind: "database", mode: "down" },
          { kind: "requests", n: 1, poison: "dies" },
          { kind: "time", ms: 5 },
          { kind: "requests", n: 2, poison: undefined },
          { kind: "time", ms: 5 },
          { kind: "kill", when: { after: 0, commits: 0 } },
          { kind: "database", mode: "up" }
        ]],
        // A failover loses an entry whose records the writer holds, and issues its id again to the
        // writer's next entry: deleting the lost one must not delete the new one.
        [[request, { kind: "time", ms: 2 }, { kind: "requests", n: 4, poison: undefined }, { kind: "rollback", stream: "all", steps: 1 }]],
        // …and when the writer then stops with PostgreSQL away, what it holds is not left to an entry that is gone.
        [[
          { kind: "database", mode: "down" },
          request,
          { kind: "time", ms: 2100 },
          { kind: "rollback", stream: "all", steps: 1 },
          { kind: "shutdown", when: { after: 0, commits: 0 } },
          request
        ]]
      ]
    })
  })

  it("with PostgreSQL down and the stream at its cap, Redis unreachable: records go to the in-process buffer, none counted stream_full", async () => {
    const noPoison = requests(fc.constant(undefined))
    const actions = fc.array(fc.oneof({ weight: 4, arbitrary: noPoison }, { weight: 2, arbitrary: time }, { weight: 2, arbitrary: redis }), {
      minLength: 1,
      maxLength: 40
    })
    const full: Array<Action> = Array.from({ length: 14 }, () => [request, { kind: "time", ms: 5 }] as const).flat()
    await fc.assert(fc.asyncProperty(actions, (a) => holds(a, (world) => void (world.database.mode = "down"))), {
      numRuns: 150,
      examples: [[[...full, { kind: "redis", mode: "refusing" }, { kind: "requests", n: 2, poison: undefined }]]]
    })
  })
})
