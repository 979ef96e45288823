/**
 * The audit journal against a real Redis (docs/audit.md#the-redis-journal), in each mode the run
 * offers (one server, a Redis Cluster, a Sentinel group: RedisModes.ts):
 * - the in-memory streams the model tests put in Redis's place (test/support/JournalModel.ts)
 *   answer as JOURNAL_LUA and XRANGE do on Redis, over random sequences of appends and deletions
 *   (ids deleted twice, deleted by a scan first, deletions naming another batch, the stream
 *   emptied, the count key lost) — in a cluster too, where the script's two keys share a slot;
 * - an entry nobody can read is counted (`unreadable`, the records its `n` says it held) and logged
 *   with its id, then deleted, and the readable entries behind it are written;
 * - (one server, behind a TCP proxy) with PostgreSQL down and the journal at its cap, a Redis that
 *   goes away does not make the writer drop records as `stream_full`: they go to the in-process
 *   buffer and are stored once PostgreSQL is back.
 */
import fc from "fast-check"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger, Redacted, References } from "effect"
import { randomUUID } from "node:crypto"
import type { AuditEntry } from "../../src/AuditLogs/Entry.ts"
import { countKey, JOURNAL_LUA, streamKey } from "../../src/AuditLogs/Journal.ts"
import { makeStreamAuditLog } from "../../src/AuditLogs/StreamWriter.ts"
import { defaultWriterOptions } from "../../src/AuditLogs/WriterOptions.ts"
import { auditRecordsDroppedTotal } from "../../src/Observability/Metrics.ts"
import { defineScript, RedisClient } from "../../src/Store/Redis.ts"
import { journalRecords } from "../support/AuditJournal.ts"
import { eventually } from "../support/Eventually.ts"
import { MemoryDatabase, MemoryJournal } from "../support/JournalModel.ts"
import { readMetric } from "../support/Metrics.ts"
import { connectTo, type RedisMode, redisModes } from "../support/RedisModes.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { TEST_REDIS_URL } from "../support/TestApp.ts"

const entry = (n: number): AuditEntry => ({
  timestamp: new Date(), user_id: "u", username: "user", user_roles: [], action_type: "GET", resource: `/authors/${n}`,
  outcome: "success", ip_address: "127.0.0.1", user_agent: "test", request_id: `r${n}`, correlation_id: "c",
  response_status: 200, duration_ms: 1, request_data: {}, error_message: null
})

const dropped = async (reason: string) => (await readMetric(auditRecordsDroppedTotal)).firstOrZero("audit_records_dropped_total", { reason })

/**
 * A call of the script: append `records` (0: none) and delete the entries at these positions of
 * those appended so far — naming their own batch, or another one (which deletes nothing).
 */
type Call = {
  readonly records: number
  readonly deletions: ReadonlyArray<{ readonly at: number; readonly otherBatch: boolean }>
}

const call: fc.Arbitrary<Call> = fc.record({
  records: fc.integer({ min: 0, max: 4 }),
  deletions: fc.array(fc.record({ at: fc.nat({ max: 12 }), otherBatch: fc.boolean() }), { maxLength: 3 })
})

const perMode = (mode: RedisMode) => describe(`audit journal on a real Redis (${mode.name})`, () => {
  it("the in-memory stream answers as JOURNAL_LUA and XRANGE do", async () => {
    const client = connectTo(mode)
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(call, { minLength: 1, maxLength: 16 }), fc.boolean(), async (calls, loseCount) => {
          const prefix = `test:${randomUUID()}:`
          const [stream, count] = [streamKey(prefix, "s3"), countKey(prefix, "s3")]
          const script = defineScript<[string, number]>(client, "auditJournal", 2, JOURNAL_LUA)
          const memory = new MemoryJournal()
          const ids: Array<{ real: string; memory: string; batch: string }> = []
          try {
            for (const [i, c] of calls.entries()) {
              const deletions = c.deletions.flatMap(({ at, otherBatch }) => {
                const appended = ids[at]
                return appended === undefined ? [] : [{ ...appended, batch: otherBatch ? `other-${at}` : appended.batch }]
              })
              if (c.records === 0 && deletions.length === 0) continue
              const batch = c.records === 0 ? "" : `batch-${i}`
              const records = c.records === 0 ? "" : "[]"
              const real = await script(stream, count, c.records, records, batch, ...deletions.flatMap((d) => [d.real, d.batch]))
              const mem = memory.script("s3", c.records, records, batch, deletions.map((d) => ({ id: d.memory, batch: d.batch })))
              expect([real[0] !== "", real[1]]).toEqual([mem[0] !== "", mem[1]])
              if (real[0] !== "") ids.push({ real: real[0], memory: mem[0], batch })
              expect(await client.get(count)).toBe(memory.count("s3") === undefined ? null : String(memory.count("s3")))
              // Once, midway: the count key lost while entries remain (evicted).
              if (loseCount && i === Math.floor(calls.length / 2)) {
                await client.del(count)
                memory.loseCount("s3")
              }
            }
            // Pages as a scan reads them: from the start or after an entry, up to an entry or the end.
            const toMemory = new Map(ids.map((i) => [i.real, i.memory]))
            const realAll = await client.xrange(stream, "-", "+")
            expect(realAll.map(([id, fields]) => [toMemory.get(id), fields])).toEqual(memory.xrange("s3", "-", "+", 1000))
            for (const [at, [id]] of realAll.entries()) {
              const [end] = realAll[Math.min(realAll.length - 1, at + 2)]!
              const page = await client.xrange(stream, `(${id}`, end, "COUNT", 2)
              expect(page.map(([i]) => toMemory.get(i))).toEqual(memory.xrange("s3", `(${toMemory.get(id)}`, toMemory.get(end)!, 2).map(([i]) => i))
            }
          } finally {
            await client.del(stream)
            await client.del(count)
          }
        }),
        { numRuns: 40 }
      )
    } finally {
      client.disconnect()
    }
  })

  it.live("an entry nobody can read is counted and logged with its id, then deleted; the entries behind it are written", () => {
    const prefix = `test:${randomUUID()}:`
    const database = new MemoryDatabase()
    const logged: Array<Readonly<Record<string, unknown>>> = []
    const logger = Logger.layer([Logger.make(({ fiber }) => void logged.push(fiber.getRef(References.CurrentLogAnnotations)))])
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const add = (key: string, ...fields: ReadonlyArray<string>) => Effect.promise(() => client.xadd(key, "*", ...fields).then((id) => id!))
      const expected: Array<[string, string, number]> = []
      expected.push([yield* add(streamKey(prefix, "s4"), "n", "3", "b", "x", "r", "not json"), "s4", 3])
      // v2 and v1 were never written in a cluster, nor are they read there.
      if (mode.name !== "Redis Cluster") {
        expected.push([yield* add(streamKey(prefix, "v2"), "n", "2", "r", "[1, 2]"), "v2", 2])
        expected.push([yield* add(streamKey(prefix, "v1"), "id", randomUUID(), "e", "{"), "v1", 1])
      }
      const good = randomUUID()
      yield* add(streamKey(prefix, "s7"), "n", "1", "b", "y", "r", JSON.stringify([{ entry_id: good, ...entry(1), timestamp: new Date().toISOString() }]))
      const before = yield* Effect.promise(() => dropped("unreadable"))
      yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "1 second" })
      yield* Effect.promise(() => eventually(async () => (await journalRecords(client, prefix)).length === 0, "the streams emptied"))
      expect([...database.rows.keys()]).toEqual([good])
      expect((yield* Effect.promise(() => dropped("unreadable"))) - before).toBe(expected.reduce((n, [, , count]) => n + count, 0))
      expect(logged.filter((a) => a["reason"] === "unreadable").map((a) => [a["entry"], a["stream"], a["dropped"]]).sort()).toEqual(expected.sort())
      expect(yield* Effect.promise(() => client.xlen(streamKey(prefix, "s4")))).toBe(0)
    }).pipe(
      Effect.scoped,
      Effect.provide(database.layer({ alive: true })),
      Effect.provide(logger),
      Effect.provide(RedisClient.layer(mode.target, prefix))
    )
  })
})

for (const mode of redisModes) perMode(mode)

describe.runIf(TEST_REDIS_URL !== undefined)("audit journal on a real Redis behind a proxy", () => {
  it.live("PostgreSQL down, the journal at its cap, then Redis away: records go to the in-process buffer, none counted stream_full, all stored once PostgreSQL is back", () => {
    const prefix = `test:${randomUUID()}:`
    const database = new MemoryDatabase()
    database.mode = "down"
    const { host, port } = hostPort(TEST_REDIS_URL ?? "")
    return Effect.acquireUseRelease(
      Effect.promise(() => startTcpProxy(host, port)),
      (proxy) =>
        Effect.gen(function*() {
          const before = yield* Effect.promise(() => dropped("stream_full"))
          const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, streamMax: 5, flushTimeout: "1 second" })
          for (let i = 0; i < 6; i++) yield* audit.record(entry(i))
          // The sixth was over the cap, as Redis counted.
          expect((yield* Effect.promise(() => dropped("stream_full"))) - before).toBe(1)
          const { client } = yield* RedisClient
          yield* Effect.promise(() => proxy.cut())
          yield* Effect.promise(() => eventually(() => client.status !== "ready", "the connection lost"))
          for (let i = 6; i < 10; i++) yield* audit.record(entry(i))
          expect((yield* Effect.promise(() => dropped("stream_full"))) - before).toBe(1)
          database.mode = "up"
          yield* Effect.promise(() => proxy.restore())
          const stored = () => [...database.rows.values()].map((s) => s.entry.request_id).sort()
          yield* Effect.promise(() => eventually(() => stored().length === 9, "9 records stored"))
          expect(stored()).toEqual(["r0", "r1", "r2", "r3", "r4", "r6", "r7", "r8", "r9"])
          // The five appended before are written from memory and leave the stream.
          yield* Effect.promise(() => eventually(async () => (await journalRecords(client, prefix)).length === 0, "the stream emptied"))
        }).pipe(
          Effect.scoped,
          Effect.provide(database.layer({ alive: true })),
          Effect.provide(RedisClient.layer(Redacted.make(viaProxy(TEST_REDIS_URL ?? "", proxy)), prefix))
        ),
      (proxy) => Effect.promise(() => proxy.close())
    )
  })
})
