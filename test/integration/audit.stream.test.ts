/**
 * The Redis Stream audit journal (AuditLogs/StreamWriter.ts):
 * - it keeps its cap while PostgreSQL is down (docs/audit.md#guarantees: the Redis Stream buffer keeps its cap
 *   during a database outage): with nothing committed, the stream's length still comes back with
 *   every append, and records past the cap are counted, not appended;
 * - appended records are written from memory and deleted from the stream after their commit;
 * - entries nobody writes (a killed instance's) are written by the recovery scan: at start all of
 *   them, later those older than `claimIdle` — each stored once;
 * - committed entries are deleted with the next pipeline of appends (or on their own when none
 *   comes), never before their record committed;
 * - a Redis that accepts and never answers does not hold requests: the concurrent records of a
 *   batch share one deadline, go on without their XADD, and are stored from the in-process buffer;
 * - an entry carries `request_data` as an object, as the entries of the previous version did.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Logger, Redacted, type Scope } from "effect"
import { SqlError } from "effect/sql"
import type { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import type { AuditEntry, StoredEntry } from "../../src/AuditLogs/Entry.ts"
import { AuditRepo } from "../../src/AuditLogs/Repo.ts"
import { captureRequestData } from "../../src/AuditLogs/RequestData.ts"
import { makeStreamAuditLog } from "../../src/AuditLogs/StreamWriter.ts"
import { defaultWriterOptions } from "../../src/AuditLogs/WriterOptions.ts"
import { auditRecordsDroppedTotal } from "../../src/Observability/Metrics.ts"
import { RedisClient } from "../../src/Store/Redis.ts"
import { readMetric } from "../support/Metrics.ts"
import { eventually } from "../support/Eventually.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { TEST_REDIS_URL } from "../support/TestApp.ts"

const entry = (n: number): AuditEntry => ({
  timestamp: new Date(), user_id: "u", username: "user", user_roles: [], action_type: "GET", resource: `/authors/${n}`,
  outcome: "success", ip_address: "127.0.0.1", user_agent: "test", request_id: `r${n}`, correlation_id: "c",
  response_status: 200, duration_ms: 1, request_data: {}, error_message: null
})

/**
 * PostgreSQL as the writer sees it: every committed batch is kept in `inserted`; while `down` is
 * true each insert fails as an unreachable server does (the writer retries it).
 */
const fakeRepo = (options: { down: boolean }) => {
  const inserted: Array<StoredEntry> = []
  const layer = Layer.succeed(AuditRepo, AuditRepo.of({
    // Decided when the insert runs (a retry runs the same effect again), as a real statement is.
    insertBatch: (batch) =>
      Effect.suspend(() =>
        options.down
          ? Effect.fail(new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: new Error("ECONNREFUSED"), message: "down", operation: "connect" }) }))
          : Effect.sync(() => void inserted.push(...batch))
      ),
    page: () => Effect.die("unused"),
    findById: () => Effect.die("unused"),
    statements: { pageRows: () => { throw new Error("unused") }, total: () => { throw new Error("unused") } }
  }))
  return { inserted, layer }
}

/** An entry as another instance appends it (StreamWriter's own field layout). */
const foreignEntry = (client: Redis, stream: string, entryId: string, n: number) =>
  client.xadd(stream, "*", "id", entryId, "e", JSON.stringify({ ...entry(n), timestamp: new Date().toISOString() }))

/**
 * Watches the writer's pipelines: the XADDs and XDELs each carries, which stream entry is which
 * record (from the XADD replies), and every XDEL of an entry whose record `committed` does not hold.
 */
const watchPipelines = (client: Redis, committed: (entryId: string) => boolean) => {
  const pipelines: Array<{ xadds: Array<string>; xdels: number }> = []
  const entryOf = new Map<string, string>()
  const deletedEarly: Array<string> = []
  const original = client.pipeline.bind(client)
  client.pipeline = ((...args: Parameters<typeof original>) => {
    const pipeline = original(...args)
    const seen = { xadds: [] as Array<string>, xdels: 0 }
    pipelines.push(seen)
    const xadd = pipeline.xadd.bind(pipeline) as (...a: Array<string | number>) => typeof pipeline
    const xdel = pipeline.xdel.bind(pipeline) as (...a: Array<string>) => typeof pipeline
    const exec = pipeline.exec.bind(pipeline)
    Object.assign(pipeline, {
      xadd: (...a: Array<string | number>) => {
        seen.xadds.push(String(a[3]))
        return xadd(...a)
      },
      xdel: (stream: string, ...ids: Array<string>) => {
        seen.xdels += ids.length
        for (const id of ids) if (!committed(entryOf.get(id) ?? "")) deletedEarly.push(id)
        return xdel(stream, ...ids)
      },
      // ioredis's auto-pipelining calls exec with a callback: passed on, and its own promise returned.
      exec: (...a: Parameters<typeof exec>) => {
        const results = exec(...a)
        void results.then((replies) =>
          seen.xadds.forEach((entryId, i) => {
            const id = replies?.[i]?.[1]
            if (typeof id === "string") entryOf.set(id, entryId)
          }), () => {})
        return results
      }
    })
    return pipeline
  }) as typeof client.pipeline
  return { pipelines, deletedEarly }
}

/** Waits until the writer has written and deleted every entry of the stream (nothing signals it). */
const untilEmpty = (client: Redis, stream: string) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => eventually(async () => (await client.xlen(stream)) === 0, `${stream} emptied`))
  })

const streamFull = async () => (await readMetric(auditRecordsDroppedTotal)).firstOrZero("audit_records_dropped_total", { reason: "stream_full" })

const prefix = `test:${randomUUID()}:`

/** Runs a test's effect with `repo` as the database and Redis under `keyPrefix`. */
const withRepo = (repo: ReturnType<typeof fakeRepo>, keyPrefix: string, redisUrl = TEST_REDIS_URL ?? "") =>
  <A, E>(self: Effect.Effect<A, E, RedisClient | AuditRepo | Scope.Scope>) =>
    self.pipe(Effect.scoped, Effect.provide(repo.layer), Effect.provide(RedisClient.layer(Redacted.make(redisUrl), keyPrefix)))

describe.runIf(TEST_REDIS_URL !== undefined)("audit Redis Stream journal", () => {
  it.live("during a PostgreSQL outage, holds its cap: records past streamMax are counted stream_full, the stream stops growing", () =>
    Effect.gen(function*() {
      const before = yield* Effect.promise(streamFull)
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, streamMax: 5, flushTimeout: "100 millis" })
      // One at a time, each awaited as a request awaits its record.
      for (let i = 0; i < 12; i++) yield* audit.record(entry(i))
      const { client } = yield* RedisClient
      const length = yield* Effect.promise(() => client.xlen(`${prefix}audit:stream`))
      expect(length).toBe(5)
      expect((yield* Effect.promise(streamFull)) - before).toBe(7)
      yield* Effect.promise(() => client.del(`${prefix}audit:stream`))
    }).pipe(withRepo(fakeRepo({ down: true }), prefix)))

  it.live("writes appended records from memory and deletes their entries once committed", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "1 second" })
      for (let i = 0; i < 20; i++) yield* audit.record(entry(i))
      const { client } = yield* RedisClient
      // Committed batches leave the stream: wait for the inserter, then for the XDEL.
      yield* Effect.promise(() => eventually(() => repo.inserted.length >= 20, "20 record(s) stored"))
      yield* untilEmpty(client, `${p}audit:stream`)
      expect(repo.inserted.map((s) => s.entry.request_id).sort()).toEqual(Array.from({ length: 20 }, (_, i) => `r${i}`).sort())
      expect(new Set(repo.inserted.map((s) => s.entryId)).size).toBe(20)
    }).pipe(withRepo(repo, p))
  })

  it.live("deletes committed entries with the next appends or on their own, never before their commit", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const watched = watchPipelines(client, (entryId) => repo.inserted.some((s) => s.entryId === entryId))
      // Batches committed as soon as they are taken, so that some commit while these records still come.
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, commitLinger: 0, flushTimeout: "1 second" })
      // 20 requests at a time, 10 each, each awaiting its record.
      yield* Effect.forEach(Array.from({ length: 20 }, (_, w) => w), (w) =>
        Effect.forEach(Array.from({ length: 10 }, (_, i) => entry(1000 + w * 10 + i)), (e) => audit.record(e), { discard: true }), {
        concurrency: "unbounded",
        discard: true
      })
      yield* Effect.promise(() => eventually(() => repo.inserted.length >= 200, "200 record(s) stored"))
      yield* untilEmpty(client, `${p}audit:stream`)
      const both = watched.pipelines.filter((x) => x.xadds.length > 0 && x.xdels > 0).length
      const alone = watched.pipelines.filter((x) => x.xadds.length === 0 && x.xdels > 0).length
      console.log(`[audit stream] 200 records: ${watched.pipelines.length} pipelines, ${both} carrying appends and deletions, ${alone} deletions alone`)
      expect(watched.deletedEarly).toEqual([])
      // Records keep coming while batches commit: their deletions ride the appends' pipelines.
      expect(both).toBeGreaterThan(0)
      expect(watched.pipelines.reduce((n, x) => n + x.xdels, 0)).toBe(200)
    }).pipe(withRepo(repo, p))
  })

  it.live("at start, writes the entries already in the stream (a killed instance's) and deletes them", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const ids = Array.from({ length: 3 }, () => randomUUID())
      for (const [n, id] of ids.entries()) yield* Effect.promise(() => foreignEntry(client, `${p}audit:stream`, id, 100 + n))
      yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "1 second" })
      yield* untilEmpty(client, `${p}audit:stream`)
      expect(repo.inserted.map((s) => s.entryId).sort()).toEqual([...ids].sort())
      expect(repo.inserted.map((s) => s.entry.resource).sort()).toEqual(["/authors/100", "/authors/101", "/authors/102"])
    }).pipe(withRepo(repo, p))
  })

  it.live("while running, writes entries older than claimIdle that nobody wrote", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      // The start scan is over once this entry is written and gone.
      const early = randomUUID()
      yield* Effect.promise(() => foreignEntry(client, `${p}audit:stream`, early, 6))
      yield* makeStreamAuditLog({ ...defaultWriterOptions, claimIdle: "300 millis", flushTimeout: "1 second" })
      yield* untilEmpty(client, `${p}audit:stream`)
      expect(repo.inserted.map((s) => s.entryId)).toEqual([early])
      // Appended after the start scan, by another (since killed) instance: only the periodic scan writes it.
      const orphan = randomUUID()
      yield* Effect.promise(() => foreignEntry(client, `${p}audit:stream`, orphan, 7))
      yield* untilEmpty(client, `${p}audit:stream`)
      expect(repo.inserted.map((s) => s.entryId)).toEqual([early, orphan])
    }).pipe(withRepo(repo, p))
  })

  it.live("past streamHeldMax during an outage, records wait in the stream only; once PostgreSQL is back every one is stored", () => {
    const p = `test:${randomUUID()}:`
    const database = { down: true }
    const repo = fakeRepo(database)
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, streamHeldMax: 2, claimIdle: "300 millis", flushTimeout: "1 second" })
      // Each awaited as a request awaits its record: all 10 are in the stream, at most 2 (+ the batch being retried) in memory.
      for (let i = 0; i < 10; i++) yield* audit.record(entry(200 + i))
      expect(yield* Effect.promise(() => client.xlen(`${p}audit:stream`))).toBe(10)
      expect(repo.inserted).toEqual([])
      // Back: the held records are written by the writer, the others by the scan once claimIdle old.
      database.down = false
      yield* untilEmpty(client, `${p}audit:stream`)
      expect([...new Set(repo.inserted.map((s) => s.entry.request_id))].sort()).toEqual(Array.from({ length: 10 }, (_, i) => `r${200 + i}`).sort())
    }).pipe(withRepo(repo, p))
  })

  it.live("Redis accepting and never answering: 50 concurrent requests go on at their batch's deadline, before the append gives up; each record is then stored from the in-process buffer", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    const { host, port } = hostPort(TEST_REDIS_URL ?? "")
    // The append's give-up is logged (after 2 s, then the records go to the buffer): an event to order against.
    const logged: Array<string> = []
    const logger = Logger.layer([Logger.make(({ message }) => void logged.push(String(Array.isArray(message) ? message[0] : message)))])
    return Effect.acquireUseRelease(
      Effect.promise(() => startTcpProxy(host, port)),
      (proxy) =>
        Effect.gen(function*() {
          const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "1 second" })
          // Redis answers: the record is appended, then stored.
          yield* audit.record(entry(400))
          yield* Effect.promise(() => eventually(() => repo.inserted.length >= 1, "1 record(s) stored"))
          proxy.blackhole()
          yield* Effect.forEach(Array.from({ length: 50 }, (_, i) => entry(401 + i)), (e) => audit.record(e), {
            concurrency: "unbounded",
            discard: true
          })
          // They went on while their XADDs were still unanswered, not when the append gave up.
          expect(logged.filter((m) => m.startsWith("Audit stream unavailable"))).toEqual([])
          yield* Effect.promise(() => eventually(() => repo.inserted.length >= 51, "51 record(s) stored"))
          expect(logged.filter((m) => m.startsWith("Audit stream unavailable"))).toHaveLength(1)
          expect(repo.inserted.map((s) => s.entry.request_id).sort()).toEqual(Array.from({ length: 51 }, (_, i) => `r${400 + i}`).sort())
          yield* Effect.promise(() => proxy.restore())
        }).pipe(withRepo(repo, p, viaProxy(TEST_REDIS_URL ?? "", proxy)), Effect.provide(logger)),
      (proxy) => Effect.promise(() => proxy.close())
    )
  })

  it.live("a stream entry holds request_data as an object (the previous version's layout), captured text spliced in", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: true })
    return Effect.gen(function*() {
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "100 millis" })
      const data = captureRequestData({ page: "2" }, { name: "x\u0000", password: "secret" })
      yield* audit.record({ ...entry(300), request_data: data, error_message: "bad \"quote\"" })
      const { client } = yield* RedisClient
      const entries = yield* Effect.promise(() => client.xrange(`${p}audit:stream`, "-", "+"))
      expect(entries).toHaveLength(1)
      const fields = entries[0]![1]
      expect(fields[0]).toBe("id")
      expect(fields[2]).toBe("e")
      expect(JSON.parse(fields[3]!)).toEqual({
        ...entry(300), timestamp: expect.any(String), request_data: { query: { page: "2" }, body: { name: "x\u0000", password: "[REDACTED]" } },
        error_message: "bad \"quote\""
      })
      yield* Effect.promise(() => client.del(`${p}audit:stream`))
    }).pipe(withRepo(repo, p))
  })
})
