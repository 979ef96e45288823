/**
 * The Redis Stream audit journal (AuditLogs/StreamWriter.ts, AuditLogs/Journal.ts), in each mode the
 * run offers (one server, a Redis Cluster, a Sentinel group: RedisModes.ts):
 * - it keeps its cap while PostgreSQL is down (docs/audit.md#guarantees: the Redis Stream buffer keeps its cap
 *   during a database outage): with nothing committed, each shard's record count still comes back
 *   with every append, and records past the cap (all shards together) are counted, not appended;
 * - the appends go to the shards in turn; an entry is deleted only when it carries the batch id
 *   its deleter names;
 * - the records of concurrent requests go to the stream as one entry: fewer entries than records,
 *   and a new instance's recovery stores every record of them once;
 * - appended records are written from memory and deleted from the stream after their commit; an
 *   entry whose records were inserted in two batches is deleted only after the second; at a
 *   shutdown with PostgreSQL away, the held records of an entry Redis no longer has are appended
 *   again;
 * - entries nobody writes (a killed instance's) are written by the recovery scan: at start all of
 *   them, later those older than `claimIdle` — each stored once; in every shard, and (not in a
 *   cluster) in the v2 and v1 streams (written during a rolling update);
 * - past streamHeldMax, entries wait in the stream only, counted (audit_records_deferred_total);
 * - committed entries are deleted with the next append to their shard (or on their own when there
 *   is nothing to append), never before their records committed;
 * - (one server, behind a TCP proxy) a Redis that accepts and never answers does not hold requests:
 *   the concurrent records of a batch share one deadline, go on without their append, and are
 *   stored from the in-process buffer;
 * - a record in an entry carries `request_data` as an object, as v1 entries do.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Logger, Redacted, type Scope } from "effect"
import { SqlError } from "effect/sql"
import type { Command } from "ioredis"
import { randomUUID } from "node:crypto"
import type { AuditEntry, StoredEntry } from "../../src/AuditLogs/Entry.ts"
import { countKey, JOURNAL_LUA, SHARDS, type ShardStream, streamKey } from "../../src/AuditLogs/Journal.ts"
import { AuditRepo, INSERT_BATCH_MAX } from "../../src/AuditLogs/Repo.ts"
import { captureRequestData } from "../../src/AuditLogs/RequestData.ts"
import { makeStreamAuditLog } from "../../src/AuditLogs/StreamWriter.ts"
import { defaultWriterOptions } from "../../src/AuditLogs/WriterOptions.ts"
import { auditRecordsDeferredTotal, auditRecordsDroppedTotal } from "../../src/Observability/Metrics.ts"
import { defineScript, RedisClient, type RedisConnection } from "../../src/Store/Redis.ts"
import type { RedisTarget } from "../../src/Config/Redis.ts"
import { journalEntries, journalRecords } from "../support/AuditJournal.ts"
import { readMetric } from "../support/Metrics.ts"
import { eventually } from "../support/Eventually.ts"
import { type RedisMode, redisModes } from "../support/RedisModes.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { TEST_REDIS_URL } from "../support/TestApp.ts"

const entry = (n: number): AuditEntry => ({
  timestamp: new Date(), user_id: "u", username: "user", user_roles: [], action_type: "GET", resource: `/authors/${n}`,
  outcome: "success", ip_address: "127.0.0.1", user_agent: "test", request_id: `r${n}`, correlation_id: "c",
  response_status: 200, duration_ms: 1, request_data: {}, error_message: null
})

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i)
const requestIds = (from: number, count: number) => range(from, count).map((n) => `r${n}`).sort()

/**
 * PostgreSQL as the writer sees it: every committed batch is kept in `inserted` (and in `batches`,
 * as it came); while `down` is true each insert fails as an unreachable server does (the writer
 * retries it); while `held` is set each insert waits for it, as a statement waits for a lock.
 * `beforeInsert` sees each batch before it commits.
 */
const fakeRepo = (options: { down: boolean; held?: Promise<void> | undefined }) => {
  const inserted: Array<StoredEntry> = []
  const batches: Array<ReadonlyArray<StoredEntry>> = []
  const hooks: { beforeInsert?: (batch: ReadonlyArray<StoredEntry>) => Promise<void> } = {}
  const commit = (batch: ReadonlyArray<StoredEntry>) =>
    Effect.promise(async () => {
      if (options.held !== undefined) await options.held
      await hooks.beforeInsert?.(batch)
      batches.push(batch)
      inserted.push(...batch)
    })
  const layer = Layer.succeed(AuditRepo, AuditRepo.of({
    // Decided when the insert runs (a retry runs the same effect again), as a real statement is.
    insertBatch: (batch) =>
      Effect.suspend(() =>
        options.down
          ? Effect.fail(new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: new Error("ECONNREFUSED"), message: "down", operation: "connect" }) }))
          : commit(batch)
      ),
    page: () => Effect.die("unused"),
    findById: () => Effect.die("unused"),
    statements: { pageRows: () => { throw new Error("unused") }, total: () => { throw new Error("unused") } }
  }))
  return { inserted, batches, hooks, layer }
}

/**
 * Records every batch inserted whose records were not all in the journal when it committed: an
 * entry deleted before all its records committed (none should be).
 */
const watchEarlyDeletes = (repo: ReturnType<typeof fakeRepo>, client: RedisConnection, prefix: string) => {
  const missing: Array<string> = []
  repo.hooks.beforeInsert = async (batch) => {
    const journaled = new Set((await journalRecords(client, prefix)).map((r) => r.entryId))
    for (const { entryId } of batch) if (!journaled.has(entryId)) missing.push(entryId)
  }
  return missing
}

/** A v1 entry, as an instance that writes v1 appends it: one record, fields `id` and `e`. */
const v1Entry = (client: RedisConnection, prefix: string, entryId: string, n: number) =>
  client.xadd(streamKey(prefix, "v1"), "*", "id", entryId, "e", JSON.stringify({ ...entry(n), timestamp: new Date().toISOString() }))

/**
 * An entry of many records, as another instance appends it: to a v3 shard (with a batch id), or
 * to v2 as an instance that writes v2 does (without one).
 */
const entryOf = (client: RedisConnection, prefix: string, stream: ShardStream | "v2", records: ReadonlyArray<{ entryId: string; n: number }>) =>
  client.xadd(
    streamKey(prefix, stream), "*", "n", records.length, ...(stream === "v2" ? [] : ["b", randomUUID()]),
    "r", JSON.stringify(records.map(({ entryId, n }) => ({ entry_id: entryId, ...entry(n), timestamp: new Date().toISOString() })))
  )

/** The records the shards hold, by their count keys (0 for a key that is not there). */
const counted = async (client: RedisConnection, prefix: string) =>
  (await Promise.all(SHARDS.map((shard) => client.get(countKey(prefix, shard))))).reduce((n, v) => n + Number(v ?? 0), 0)

/** Deletes every key of the journal under `prefix`, one command each (they are in many slots of a cluster). */
const dropJournal = (client: RedisConnection, prefix: string) =>
  Effect.promise(() =>
    Promise.all([
      ...(["v1", "v2", ...SHARDS] as const).map((stream) => client.del(streamKey(prefix, stream))),
      ...(["v2", ...SHARDS] as const).map((stream) => client.del(countKey(prefix, stream)))
    ])
  )

/**
 * Watches the writer's journal calls (the commands its client sends, auto-pipelined): for each
 * append/delete call on one of `prefix`'s shards, the shard, the records it appends and the
 * entries it deletes.
 */
const watchJournal = (client: RedisConnection, prefix: string) => {
  const shards = new Map(SHARDS.map((shard) => [streamKey(prefix, shard), shard]))
  const calls: Array<{ shard: ShardStream; records: number; deletions: number }> = []
  const original = client.pipeline.bind(client)
  client.pipeline = ((...args: Parameters<typeof original>) => {
    const pipeline = original(...args) as ReturnType<typeof original> & { sendCommand: (command: Command) => unknown }
    const send = pipeline.sendCommand.bind(pipeline)
    pipeline.sendCommand = (command: Command) => {
      // EVALSHA sha numkeys stream count n records batch [id batch]…
      const a = command.args.map(String)
      const shard = shards.get(a[2] ?? "")
      if ((command.name === "evalsha" || command.name === "eval") && shard !== undefined) {
        calls.push({ shard, records: Number(a[4]), deletions: (a.length - 7) / 2 })
      }
      return send(command)
    }
    return pipeline
  }) as typeof client.pipeline
  return calls
}

/** Waits until the writer has written and deleted every entry of both streams (nothing signals it). */
const untilEmpty = (client: RedisConnection, prefix: string) =>
  Effect.promise(() => eventually(async () => (await journalRecords(client, prefix)).length === 0, `${prefix} journal emptied`))

const deferred = async () => (await readMetric(auditRecordsDeferredTotal)).firstOrZero("audit_records_deferred_total")

const streamFull = async () => (await readMetric(auditRecordsDroppedTotal)).firstOrZero("audit_records_dropped_total", { reason: "stream_full" })

/** Runs a test's effect with `repo` as the database and the Redis of `target` (a URL: one server) under `keyPrefix`. */
const withRepo = (repo: ReturnType<typeof fakeRepo>, keyPrefix: string, target: RedisTarget | string) =>
  <A, E>(self: Effect.Effect<A, E, RedisClient | AuditRepo | Scope.Scope>) =>
    self.pipe(
      Effect.scoped,
      Effect.provide(repo.layer),
      Effect.provide(RedisClient.layer(typeof target === "string" ? Redacted.make(target) : target, keyPrefix))
    )

/** `count` requests at once, each awaiting its record. */
const burst = (audit: { record: (e: AuditEntry) => Effect.Effect<void> }, from: number, count: number) =>
  Effect.forEach(range(from, count), (n) => audit.record(entry(n)), { concurrency: "unbounded", discard: true })

const suite = (mode: RedisMode) => describe(`audit Redis Stream journal (${mode.name})`, () => {
  const cluster = mode.name === "Redis Cluster"

  it.live("during a PostgreSQL outage, holds its cap in records over all shards: records past streamMax are counted stream_full, the journal stops growing", () => {
    const p = `test:${randomUUID()}:`
    return Effect.gen(function*() {
      const before = yield* Effect.promise(streamFull)
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, streamMax: 5, flushTimeout: "100 millis" })
      // One at a time, each awaited as a request awaits its record: each to the next shard.
      for (let i = 0; i < 12; i++) yield* audit.record(entry(i))
      const { client } = yield* RedisClient
      const { v3 } = yield* Effect.promise(() => journalEntries(client, p))
      expect(v3).toHaveLength(5)
      expect(yield* Effect.promise(() => Promise.all(SHARDS.map((shard) => client.xlen(streamKey(p, shard)))))).toEqual([1, 1, 1, 1, 1, ...Array(11).fill(0)])
      expect(yield* Effect.promise(() => counted(client, p))).toBe(5)
      expect((yield* Effect.promise(streamFull)) - before).toBe(7)
      yield* dropJournal(client, p)
    }).pipe(withRepo(fakeRepo({ down: true }), p, mode.target))
  })

  it.live("a shard's record count follows every append and deletion: an id deleted twice counts once, an entry of another batch is not deleted, the count goes with the last entry", () => {
    const p = `test:${randomUUID()}:`
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const [stream, count] = [streamKey(p, "s5"), countKey(p, "s5")]
      const journal = defineScript<[string, number]>(client, "auditJournal", 2, JOURNAL_LUA)
      const call = (...args: ReadonlyArray<string | number>) => Effect.promise(() => journal(stream, count, ...args))
      const [a, afterA] = yield* call(3, "[]", "A")
      const [b, afterB] = yield* call(2, "[]", "B")
      expect([afterA, afterB]).toEqual([3, 5])
      // A (3 records) deleted with C appended; then A again (a scan came first) and nothing changes.
      const [c, afterC] = yield* call(4, "[]", "C", a, "A")
      expect(afterC).toBe(6)
      expect(yield* call(0, "", "", a, "A")).toEqual(["", 6])
      // B's id named with another batch (an id a failover issued again to another entry): B stays.
      expect(yield* call(0, "", "", b, "A")).toEqual(["", 6])
      expect(yield* Effect.promise(() => client.xlen(stream))).toBe(2)
      // Deletions alone; the last one takes the count with it.
      expect(yield* call(0, "", "", b, "B")).toEqual(["", 4])
      expect(yield* Effect.promise(() => client.get(count))).toBe("4")
      expect(yield* call(0, "", "", c, "C")).toEqual(["", 0])
      expect(yield* Effect.promise(() => client.exists(count))).toBe(0)
      // A count lost while entries remain (an evicted key) never goes below 0.
      const [d] = yield* call(2, "[]", "D")
      const [e] = yield* call(1, "[]", "E")
      yield* Effect.promise(() => client.del(count))
      expect(yield* call(0, "", "", d, "D")).toEqual(["", 0])
      expect(yield* call(0, "", "", e, "E")).toEqual(["", 0])
      expect(yield* Effect.promise(() => Promise.all([client.exists(stream), client.exists(count)]))).toEqual([1, 0]) // the empty stream stays
      yield* dropJournal(client, p)
    }).pipe(withRepo(fakeRepo({ down: false }), p, mode.target))
  })

  it.live("writes appended records from memory, appended to the shards in turn, and deletes their entries once committed", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const calls = watchJournal(client, p)
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "1 second" })
      for (let i = 0; i < 20; i++) yield* audit.record(entry(i))
      // Committed batches leave the stream: wait for the inserter, then for the XDEL.
      yield* Effect.promise(() => eventually(() => repo.inserted.length >= 20, "20 record(s) stored"))
      yield* untilEmpty(client, p)
      expect(repo.inserted.map((s) => s.entry.request_id).sort()).toEqual(requestIds(0, 20))
      expect(new Set(repo.inserted.map((s) => s.entryId)).size).toBe(20)
      // One at a time: an entry each, to the shards in turn; each entry deleted once.
      const appends = calls.filter((c) => c.records > 0)
      expect(appends.map((c) => c.shard)).toEqual(range(0, 20).map((i) => SHARDS[i % SHARDS.length]))
      expect(calls.reduce((n, c) => n + c.deletions, 0)).toBe(20)
      // Each shard's record count goes with its last entry.
      expect(yield* Effect.promise(() => Promise.all(SHARDS.map((shard) => client.exists(countKey(p, shard)))))).toEqual(SHARDS.map(() => 0))
    }).pipe(withRepo(repo, p, mode.target))
  })

  it.live("a shutdown with PostgreSQL away appends again the held records of an entry Redis no longer has (a failover lost it), and only those", () => {
    const p = `test:${randomUUID()}:`
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      yield* Effect.gen(function*() {
        const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "400 millis" })
        // One at a time: an entry each, in s0…s4.
        for (let i = 0; i < 5; i++) yield* audit.record(entry(700 + i))
        // The entry of s2 gone, as after a failover to a replica that never had it.
        yield* Effect.promise(() => client.del(streamKey(p, "s2")))
      }).pipe(Effect.scoped)
      // Closed: every record is in the journal once, r702 in a new entry in its shard.
      const records = yield* Effect.promise(() => journalRecords(client, p))
      expect(records.map((r) => r.entry.request_id).sort()).toEqual(requestIds(700, 5))
      expect(yield* Effect.promise(() => client.xlen(streamKey(p, "s2")))).toBe(1)
      yield* dropJournal(client, p)
    }).pipe(withRepo(fakeRepo({ down: true }), p, mode.target))
  })

  it.live("a burst of concurrent records is fewer entries than records; after a restart the new instance stores every record once", () => {
    const p = `test:${randomUUID()}:`
    const down = fakeRepo({ down: true })
    const up = fakeRepo({ down: false })
    return Effect.gen(function*() {
      // PostgreSQL away: 100 concurrent requests, each answered once its record is in the stream;
      // then the instance stops (its flush cannot reach PostgreSQL: the records stay in the stream).
      yield* Effect.gen(function*() {
        const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "100 millis" })
        yield* burst(audit, 500, 100)
        const { client } = yield* RedisClient
        const { v3: current } = yield* Effect.promise(() => journalEntries(client, p))
        console.log(`[audit stream] ${mode.name}: 100 concurrent records: ${current.length} stream entries`)
        expect(current.length).toBeLessThan(100)
        expect(current.flatMap((e) => e.records).map((r) => r.entry.request_id).sort()).toEqual(requestIds(500, 100))
        expect(current.reduce((n, e) => n + e.counted, 0)).toBe(100)
        expect(yield* Effect.promise(() => counted(client, p))).toBe(100)
      }).pipe(withRepo(down, p, mode.target))
      expect(down.inserted).toEqual([])
      // The next instance, PostgreSQL back: its start scan writes every record of those entries.
      yield* Effect.gen(function*() {
        yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "1 second" })
        const { client } = yield* RedisClient
        yield* untilEmpty(client, p)
        expect(up.inserted.map((s) => s.entry.request_id).sort()).toEqual(requestIds(500, 100))
        expect(new Set(up.inserted.map((s) => s.entryId)).size).toBe(100)
      }).pipe(withRepo(up, p, mode.target))
    })
  })

  it.live("an entry whose records are inserted in two batches is deleted only after the second committed", () => {
    const p = `test:${randomUUID()}:`
    let release = () => {}
    const database: { down: boolean; held?: Promise<void> | undefined } = { down: false, held: new Promise<void>((resolve) => (release = resolve)) }
    const repo = fakeRepo(database)
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const early = watchEarlyDeletes(repo, client, p)
      // No linger: the held batch is the first record alone, whenever the bursts come.
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, commitLinger: 0, flushTimeout: "1 second" })
      // PostgreSQL holds the first batch; behind it two bursts wait in memory, more than one batch.
      yield* audit.record(entry(0))
      yield* burst(audit, 1, 300)
      yield* burst(audit, 301, 300)
      const { v3: current } = yield* Effect.promise(() => journalEntries(client, p))
      // Keyed by batch: two shards may hold entries with one id.
      const entryOf = new Map(current.flatMap((e) => e.records.map((r) => [r.entryId, e.batch] as const)))
      expect(entryOf.size).toBe(601)
      database.held = undefined
      release()
      yield* untilEmpty(client, p)
      expect(repo.inserted.map((s) => s.entry.request_id).sort()).toEqual(requestIds(0, 601))
      expect(repo.batches.every((b) => b.length <= INSERT_BATCH_MAX)).toBe(true)
      // Some entry had records in two batches (the first after the held one ended inside an entry)…
      const batchesOf = new Map<string, Set<number>>()
      repo.batches.forEach((batch, i) => batch.forEach(({ entryId }) => batchesOf.set(entryOf.get(entryId)!, (batchesOf.get(entryOf.get(entryId)!) ?? new Set()).add(i))))
      expect([...batchesOf.values()].some((batches) => batches.size > 1)).toBe(true)
      // …and every record was still in the stream when its batch committed.
      expect(early).toEqual([])
    }).pipe(withRepo(repo, p, mode.target))
  })

  it.live("deletes committed entries with the next appends to their shard or on their own, never before their records committed", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const calls = watchJournal(client, p)
      const early = watchEarlyDeletes(repo, client, p)
      // Batches committed as soon as they are taken, so that some commit while these records still
      // come; one shard, so that every append may carry deletions.
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, commitLinger: 0, appendShards: 1, flushTimeout: "1 second" })
      // 20 requests at a time, 10 each, each awaiting its record.
      yield* Effect.forEach(range(0, 20), (w) => Effect.forEach(range(1000 + w * 10, 10), (n) => audit.record(entry(n)), { discard: true }), {
        concurrency: "unbounded",
        discard: true
      })
      yield* Effect.promise(() => eventually(() => repo.inserted.length >= 200, "200 record(s) stored"))
      yield* untilEmpty(client, p)
      const appends = calls.filter((c) => c.records > 0)
      const both = appends.filter((c) => c.deletions > 0).length
      const alone = calls.filter((c) => c.records === 0).length
      console.log(`[audit stream] ${mode.name}: 200 records: ${appends.length} entries, ${both} appends carrying deletions, ${alone} deletions alone`)
      expect(early).toEqual([])
      expect(appends.reduce((n, c) => n + c.records, 0)).toBe(200)
      // Records keep coming while batches commit: their deletions ride the appends.
      expect(both).toBeGreaterThan(0)
      // Every entry deleted once.
      expect(calls.reduce((n, c) => n + c.deletions, 0)).toBe(appends.length)
    }).pipe(withRepo(repo, p, mode.target))
  })

  it.live("at start, writes the entries already in the streams (a killed instance's: v3 shards, and v2 and v1 but in a cluster) and deletes them", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const v1 = cluster ? [] : range(0, 3).map(() => randomUUID())
      for (const [i, id] of v1.entries()) yield* Effect.promise(() => v1Entry(client, p, id, 100 + i))
      const v2 = cluster ? [] : range(0, 2).map(() => randomUUID())
      if (!cluster) yield* Effect.promise(() => entryOf(client, p, "v2", v2.map((entryId, i) => ({ entryId, n: 103 + i }))))
      const v3 = range(0, 4).map(() => randomUUID())
      for (const [i, shard] of (["s0", "s15"] as const).entries()) {
        yield* Effect.promise(() => entryOf(client, p, shard, v3.slice(i * 2, i * 2 + 2).map((entryId, j) => ({ entryId, n: 105 + i * 2 + j }))))
      }
      yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "1 second" })
      yield* untilEmpty(client, p)
      expect(repo.inserted.map((s) => s.entryId).sort()).toEqual([...v1, ...v2, ...v3].sort())
      expect(repo.inserted.map((s) => s.entry.resource).sort()).toEqual(
        [...(cluster ? [] : range(100, 5)), ...range(105, 4)].map((n) => `/authors/${n}`).sort()
      )
    }).pipe(withRepo(repo, p, mode.target))
  })

  it.live("while running, writes entries older than claimIdle that nobody wrote, in every stream", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: false })
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      // The start scan is over once this entry is written and gone.
      const early = randomUUID()
      yield* Effect.promise(() => entryOf(client, p, "s9", [{ entryId: early, n: 6 }]))
      yield* makeStreamAuditLog({ ...defaultWriterOptions, claimIdle: "300 millis", flushTimeout: "1 second" })
      yield* untilEmpty(client, p)
      expect(repo.inserted.map((s) => s.entryId)).toEqual([early])
      // Appended after the start scan, by other (since killed) instances, one of each layout (v3
      // only in a cluster): only the periodic scan writes them.
      const v1Orphan = cluster ? [] : [randomUUID()]
      const v2Orphans = cluster ? [] : [randomUUID(), randomUUID()]
      const v3Orphans = [randomUUID(), randomUUID()]
      for (const id of v1Orphan) yield* Effect.promise(() => v1Entry(client, p, id, 7))
      if (!cluster) yield* Effect.promise(() => entryOf(client, p, "v2", v2Orphans.map((entryId, i) => ({ entryId, n: 8 + i }))))
      yield* Effect.promise(() => entryOf(client, p, "s2", v3Orphans.map((entryId, i) => ({ entryId, n: 10 + i }))))
      yield* untilEmpty(client, p)
      expect(repo.inserted.map((s) => s.entryId).sort()).toEqual([early, ...v1Orphan, ...v2Orphans, ...v3Orphans].sort())
    }).pipe(withRepo(repo, p, mode.target))
  })

  it.live("past streamHeldMax during an outage, records wait in the stream only; once PostgreSQL is back every one is stored", () => {
    const p = `test:${randomUUID()}:`
    const database = { down: true }
    const repo = fakeRepo(database)
    return Effect.gen(function*() {
      const { client } = yield* RedisClient
      const deferredBefore = yield* Effect.promise(deferred)
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, streamHeldMax: 2, claimIdle: "300 millis", flushTimeout: "1 second" })
      // Each awaited as a request awaits its record: all 10 are in the stream, 2 in memory (the first being retried).
      for (let i = 0; i < 10; i++) yield* audit.record(entry(200 + i))
      // And a burst: its entries are left out of memory whole.
      yield* burst(audit, 210, 10)
      expect((yield* Effect.promise(() => journalRecords(client, p))).map((r) => r.entry.request_id).sort()).toEqual(requestIds(200, 20))
      expect(repo.inserted).toEqual([])
      // The 18 left to the scan are counted.
      expect((yield* Effect.promise(deferred)) - deferredBefore).toBe(18)
      // Back: the held records are written by the writer, the others by the scan once claimIdle old.
      database.down = false
      yield* untilEmpty(client, p)
      expect([...new Set(repo.inserted.map((s) => s.entry.request_id))].sort()).toEqual(requestIds(200, 20))
    }).pipe(withRepo(repo, p, mode.target))
  })

  it.live("an entry's records hold request_data as an object (as v1 entries do), captured text spliced in", () => {
    const p = `test:${randomUUID()}:`
    const repo = fakeRepo({ down: true })
    return Effect.gen(function*() {
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, flushTimeout: "100 millis" })
      const data = captureRequestData({ page: "2" }, { name: "x\u0000", password: "secret" })
      yield* audit.record({ ...entry(300), request_data: data, error_message: "bad \"quote\"" })
      const { client } = yield* RedisClient
      // The writer's first append goes to the first shard.
      const entries = yield* Effect.promise(() => client.xrange(streamKey(p, "s0"), "-", "+"))
      expect(entries).toHaveLength(1)
      const fields = entries[0]![1]
      expect([fields[0], fields[1], fields[2], fields[4]]).toEqual(["n", "1", "b", "r"])
      expect(fields[3]).toMatch(/^[0-9a-f-]{36}$/)
      expect(JSON.parse(fields[5]!)).toEqual([{
        entry_id: expect.any(String), ...entry(300), timestamp: expect.any(String),
        request_data: { query: { page: "2" }, body: { name: "x\u0000", password: "[REDACTED]" } }, error_message: "bad \"quote\""
      }])
      yield* dropJournal(client, p)
    }).pipe(withRepo(repo, p, mode.target))
  })
})

for (const mode of redisModes) suite(mode)

describe.runIf(TEST_REDIS_URL !== undefined)("audit Redis Stream journal behind a proxy (one server)", () => {
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
          yield* burst(audit, 401, 50)
          // They went on while their append was still unanswered, not when it gave up.
          expect(logged.filter((m) => m.startsWith("Audit stream unavailable"))).toEqual([])
          yield* Effect.promise(() => eventually(() => repo.inserted.length >= 51, "51 record(s) stored"))
          expect(logged.filter((m) => m.startsWith("Audit stream unavailable"))).toHaveLength(1)
          expect(repo.inserted.map((s) => s.entry.request_id).sort()).toEqual(requestIds(400, 51))
          // Still failing: not said again (docs/operations.md#outages).
          yield* burst(audit, 451, 20)
          yield* Effect.promise(() => eventually(() => repo.inserted.length >= 71, "71 record(s) stored"))
          expect(logged.filter((m) => m.startsWith("Audit stream unavailable"))).toHaveLength(1)
          yield* Effect.promise(() => proxy.restore())
        }).pipe(withRepo(repo, p, viaProxy(TEST_REDIS_URL ?? "", proxy)), Effect.provide(logger)),
      (proxy) => Effect.promise(() => proxy.close())
    )
  })
})

