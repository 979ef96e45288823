/**
 * The in-process audit writer against a scripted repository: a failing database is retried
 * (the batch is never discarded), overflow is counted, closing the scope flushes, batches are
 * bounded; plus request_data capture and the inclusive date parser.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Scope } from "effect"
import { SqlError } from "effect/sql"
import type { AuditEntry, StoredEntry } from "../../src/AuditLogs/Entry.ts"
import { outcomeOf } from "../../src/AuditLogs/Entry.ts"
import { parseIsoDate } from "../../src/AuditLogs/Api.ts"
import { AuditRepo, INSERT_BATCH_MAX } from "../../src/AuditLogs/Repo.ts"
import { captureRequestData } from "../../src/AuditLogs/RequestData.ts"
import { redact } from "../../src/Domain/Secrets.ts"
import { estimateRecordBytes } from "../../src/AuditLogs/Buffer.ts"
import { isOutage } from "../../src/AuditLogs/Inserter.ts"
import { makeBufferedAuditLog } from "../../src/AuditLogs/Writer.ts"
import { defaultWriterOptions } from "../../src/AuditLogs/WriterOptions.ts"
import { ShutdownDeadline } from "../../src/Lifecycle.ts"
import { auditBufferBytes, auditRecordsDroppedTotal } from "../../src/Observability/Metrics.ts"
import { readMetric } from "../support/Metrics.ts"

const entry = (n: number): AuditEntry => ({
  timestamp: new Date(1_700_000_000_000 + n),
  user_id: "u1",
  username: "user",
  user_roles: ["admin"],
  action_type: "GET",
  resource: `/authors/${n}`,
  outcome: "success",
  ip_address: "127.0.0.1",
  user_agent: "test",
  request_id: `r${n}`,
  correlation_id: "c",
  response_status: 200,
  duration_ms: 1,
  request_data: {},
  error_message: null
})

/**
 * A PostgreSQL error as @effect/sql-pg reports it: the reason its SQLSTATE classifies to
 * (internal/sqlError.ts `classifySqlState`), whose cause is an Error carrying the server's
 * fields (SQLSTATE in `code`).
 */
const pgError = (code: string, message: string) => {
  const props = { cause: Object.assign(new Error(message), { code }), message, operation: "query" }
  const reason = code.startsWith("08")
    ? new SqlError.ConnectionError(props)
    : code.startsWith("23")
    ? new SqlError.ConstraintError(props)
    : code.startsWith("42")
    ? new SqlError.SqlSyntaxError(props)
    : code === "40001"
    ? new SqlError.SerializationError(props)
    : new SqlError.UnknownError(props)
  return new SqlError.SqlError({ reason })
}

/** No SQLSTATE at all: the driver could not reach the server. */
const connectionError = (message: string) =>
  new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: new Error(message), message, operation: "connect" }) })

/**
 * A repository that stores by entry id (like ON CONFLICT DO NOTHING), fails while `down`, and
 * refuses (SQLSTATE 54000, as PostgreSQL does an oversized index row) every batch holding a record
 * for which `refuses` is true.
 */
const scriptedRepo = (refuses: (entry: AuditEntry) => boolean = () => false) => {
  const state = { down: false, attempts: 0, batches: [] as Array<number>, stored: new Map<string, AuditEntry>() }
  const layer = Layer.succeed(AuditRepo, AuditRepo.of({
    insertBatch: (batch: ReadonlyArray<StoredEntry>) =>
      Effect.suspend(() => {
        state.attempts++
        if (state.down) return Effect.fail(connectionError("connection refused"))
        if (batch.some(({ entry }) => refuses(entry))) return Effect.fail(pgError("54000", "index row size 3104 exceeds btree version 4 maximum 2704"))
        state.batches.push(batch.length)
        for (const { entryId, entry } of batch) state.stored.set(entryId, entry)
        return Effect.void
      }),
    page: () => Effect.die("unused"),
    findById: () => Effect.die("unused"),
    statements: { pageRows: () => { throw new Error("unused") }, total: () => { throw new Error("unused") } }
  }))
  return { state, layer }
}

const waitUntil = (check: () => boolean) =>
  Effect.repeat(Effect.sleep("10 millis"), { until: check }).pipe(Effect.timeout("20 seconds"))

const droppedCount = async (reason = "buffer_full") =>
  (await readMetric(auditRecordsDroppedTotal)).firstOrZero("audit_records_dropped_total", { reason })

describe("audit writer (in-process buffer)", () => {
  it.live("a database outage is retried until it is back; nothing is discarded", () =>
    Effect.gen(function*() {
      const { state, layer } = scriptedRepo()
      state.down = true
      const scope = yield* Scope.make()
      const audit = yield* makeBufferedAuditLog(defaultWriterOptions).pipe(Scope.provide(scope), Effect.provide(layer))
      for (let i = 0; i < 1200; i++) yield* audit.record(entry(i))
      yield* waitUntil(() => state.attempts >= 3)
      expect(state.stored.size).toBe(0)
      state.down = false
      yield* waitUntil(() => state.stored.size === 1200)
      expect(Math.max(...state.batches)).toBeLessThanOrEqual(INSERT_BATCH_MAX)
      yield* Scope.close(scope, Exit.void)
    }))

  it.live("closing the scope (SIGTERM) flushes the buffer and the batch in flight", () =>
    Effect.gen(function*() {
      const { state, layer } = scriptedRepo()
      state.down = true
      const scope = yield* Scope.make()
      const audit = yield* makeBufferedAuditLog(defaultWriterOptions).pipe(Scope.provide(scope), Effect.provide(layer))
      for (let i = 0; i < 700; i++) yield* audit.record(entry(i))
      yield* waitUntil(() => state.attempts >= 1)
      const attempts = state.attempts
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* waitUntil(() => state.attempts > attempts + 1) // the flush is retrying against the "down" database
      state.down = false
      yield* Fiber.await(closing)
      expect(state.stored.size).toBe(700)
    }))

  it.live("at shutdown the flush ends by the process's deadline (main.ts: 7.5 s after SIGTERM), counting what it could not write", () =>
    Effect.gen(function*() {
      const { state, layer } = scriptedRepo()
      state.down = true
      const before = yield* Effect.promise(() => droppedCount("shutdown"))
      const scope = yield* Scope.make()
      const signalled: { deadline?: number } = {}
      // flushTimeout alone would retry for a minute; the process's deadline comes first.
      const audit = yield* makeBufferedAuditLog({ ...defaultWriterOptions, flushTimeout: "60 seconds" }).pipe(
        Scope.provide(scope),
        Effect.provide(layer),
        Effect.provideService(ShutdownDeadline, { at: () => signalled.deadline })
      )
      for (let i = 0; i < 30; i++) yield* audit.record(entry(i))
      yield* waitUntil(() => state.attempts >= 1)
      signalled.deadline = Date.now() + 300
      const started = Date.now()
      yield* Scope.close(scope, Exit.void)
      const tookMs = Date.now() - started
      const dropped = (yield* Effect.promise(() => droppedCount("shutdown"))) - before
      console.log(`[audit] flush at shutdown with the database down: ended after ${tookMs} ms, ${dropped} records counted as dropped`)
      expect(dropped).toBe(30)
      expect(state.stored.size).toBe(0)
      expect(tookMs).toBeLessThan(60_000)
    }))

  it.live("a full buffer counts and logs each refused record", () =>
    Effect.gen(function*() {
      const { state, layer } = scriptedRepo()
      state.down = true
      const before = yield* Effect.promise(() => droppedCount())
      const scope = yield* Scope.make()
      const audit = yield* makeBufferedAuditLog({ ...defaultWriterOptions, bufferMax: 10, flushTimeout: "100 millis" }).pipe(
        Scope.provide(scope),
        Effect.provide(layer)
      )
      yield* audit.record(entry(0))
      yield* waitUntil(() => state.attempts >= 1) // the first record is in flight, out of the buffer
      for (let i = 1; i <= 15; i++) yield* audit.record(entry(i))
      expect((yield* Effect.promise(() => droppedCount())) - before).toBe(5)
      state.down = false
      yield* waitUntil(() => state.stored.size === 11)
      yield* Scope.close(scope, Exit.void)
      expect(state.stored.size).toBe(11)
    }))
})

describe("audit writer: the buffer is bounded in bytes", () => {
  it("a record's estimate covers its strings and its captured request_data, without serializing it again", () => {
    const small = estimateRecordBytes(entry(0))
    expect(estimateRecordBytes({ ...entry(0), user_agent: "u".repeat(20_000) })).toBeGreaterThanOrEqual(small + 20_000)
    const data = captureRequestData(undefined, { text: "t".repeat(5000) })
    expect(estimateRecordBytes({ ...entry(0), request_data: data })).toBeGreaterThanOrEqual(small + 5000)
  })

  it.live("records over the byte cap are refused and counted; taking a batch frees its bytes", () =>
    Effect.gen(function*() {
      const { state, layer } = scriptedRepo()
      state.down = true
      // ~20 KB records (a long resource and user agent): the record count cap is far away.
      const big = (n: number): AuditEntry => ({ ...entry(n), resource: `/authors/${n}/${"r".repeat(4000)}`, user_agent: "a".repeat(6000) })
      const size = estimateRecordBytes(big(1))
      expect(size).toBeGreaterThan(20_000)
      const before = yield* Effect.promise(() => droppedCount())
      const scope = yield* Scope.make()
      const audit = yield* makeBufferedAuditLog({ ...defaultWriterOptions, bufferMaxBytes: 5 * size + size / 2, flushTimeout: "100 millis" })
        .pipe(Scope.provide(scope), Effect.provide(layer))
      yield* audit.record(big(0))
      yield* waitUntil(() => state.attempts >= 1) // the first record is in flight: its bytes left the buffer
      for (let i = 1; i <= 12; i++) yield* audit.record(big(i))
      expect((yield* Effect.promise(() => droppedCount())) - before).toBe(7)
      // audit_buffer_bytes shows what waits: the five records that fit.
      expect((yield* Effect.promise(() => readMetric(auditBufferBytes))).first("audit_buffer_bytes")).toBe(5 * size)
      state.down = false
      yield* waitUntil(() => state.stored.size === 6)
      // The buffer emptied: its estimate is back to zero, so five more fit again.
      for (let i = 13; i <= 17; i++) yield* audit.record(big(i))
      yield* waitUntil(() => state.stored.size === 11)
      expect((yield* Effect.promise(() => droppedCount())) - before).toBe(7)
      yield* Scope.close(scope, Exit.void)
      expect([...state.stored.values()].map((e) => e.request_id).sort()).toEqual(
        [0, 1, 2, 3, 4, 5, 13, 14, 15, 16, 17].map((n) => `r${n}`).sort()
      )
    }))
})

describe("audit writer: records the database refuses", () => {
  it.live("a poison record is stored reduced and never blocks the records behind it", () =>
    Effect.gen(function*() {
      // Refuses any record whose resource is long: the minimal form (128 bytes) is taken.
      const { state, layer } = scriptedRepo((e) => e.resource.length > 200)
      const scope = yield* Scope.make()
      const audit = yield* makeBufferedAuditLog(defaultWriterOptions).pipe(Scope.provide(scope), Effect.provide(layer))
      const poison = { ...entry(0), resource: "/" + "x".repeat(3000) }
      yield* audit.record(poison)
      for (let i = 1; i <= 20; i++) yield* audit.record(entry(i))
      yield* waitUntil(() => state.stored.size === 21)
      const stored = [...state.stored.values()].find((e) => e.request_id === "r0")
      expect(stored?.resource.length).toBeLessThanOrEqual(128)
      expect(stored?.request_data).toEqual({ _unstorable: true })
      yield* Scope.close(scope, Exit.void)
    }))

  it.live("a record refused even reduced is dropped once and counted as refused; the rest flow on", () =>
    Effect.gen(function*() {
      const { state, layer } = scriptedRepo((e) => e.user_id === "cursed")
      const before = yield* Effect.promise(() => droppedCount("refused"))
      const scope = yield* Scope.make()
      const audit = yield* makeBufferedAuditLog(defaultWriterOptions).pipe(Scope.provide(scope), Effect.provide(layer))
      yield* audit.record({ ...entry(0), user_id: "cursed" })
      for (let i = 1; i <= 5; i++) yield* audit.record(entry(i))
      yield* waitUntil(() => state.stored.size === 5)
      yield* Scope.close(scope, Exit.void)
      expect((yield* Effect.promise(() => droppedCount("refused"))) - before).toBe(1)
      expect([...state.stored.values()].some((e) => e.user_id === "cursed")).toBe(false)
    }))

  it("SQLSTATEs: connection, shutdown, resources and serialization are outages; data and limits are the record's", () => {
    for (const code of ["08006", "08001", "57P01", "53300", "40001", "XX000"]) expect(isOutage(pgError(code, "x")), code).toBe(true)
    for (const code of ["54000", "22021", "22P05", "23502", "23514", "42804"]) expect(isOutage(pgError(code, "x")), code).toBe(false)
    expect(isOutage(connectionError("ECONNREFUSED"))).toBe(true)
  })
})

describe("audit record rules", () => {
  it("outcome from status", () => {
    expect([200, 201, 204, 400, 401, 403, 404, 409, 422, 429, 500].map(outcomeOf)).toEqual(
      ["success", "success", "success", "error", "error", "permission_denied", "error", "error", "error", "error", "error"]
    )
  })

  it("redacts every listed key, any case, at any depth, inside arrays", () => {
    const keys = ["password", "passwd", "secret", "token", "access_token", "refresh_token", "authorization", "api_key",
      "client_secret", "credit_card", "card_number", "cvv", "ssn"]
    const input = Object.fromEntries(keys.map((k, i) => [i % 2 === 0 ? k.toUpperCase() : k, { deep: "value" }]))
    const out = redact({ a: [{ b: input }], keep: { secretive: "kept" } }) as { a: Array<{ b: Record<string, unknown> }>; keep: unknown }
    expect(Object.values(out.a[0]!.b).every((v) => v === "[REDACTED]")).toBe(true)
    expect(out.keep).toEqual({ secretive: "kept" })
  })

  it("request_data is captured as its JSON text: {query, body}, absent parts left out, at most 8 KiB", () => {
    expect(captureRequestData(undefined, undefined)).toBe("{}")
    expect(captureRequestData({ q: "1" }, { name: "x" })).toBe(JSON.stringify({ query: { q: "1" }, body: { name: "x" } }))
    expect(captureRequestData(undefined, { password: "p", user: { token: "t" } })).toBe(
      JSON.stringify({ body: { password: "[REDACTED]", user: { token: "[REDACTED]" } } })
    )
    const big = captureRequestData({ q: "1" }, { blob: "é".repeat(10_000) })
    expect(Buffer.byteLength(big)).toBeLessThanOrEqual(8192)
    expect(JSON.parse(big)).toEqual({ query: { q: "1" }, body: { _truncated: true, _bytes: Buffer.byteLength(JSON.stringify({ blob: "é".repeat(10_000) })) } })
    // Both parts too big: only the marker.
    expect(captureRequestData({ q: "q".repeat(9000) }, { blob: "b".repeat(9000) })).toBe(
      JSON.stringify({ query: { _truncated: true, _bytes: 9008 }, body: { _truncated: true, _bytes: 9011 } })
    )
  })

  it("ISO 8601 dates: inclusive bare end dates, zones, impossible dates refused", () => {
    expect(parseIsoDate("2026-01-31", false)?.toISOString()).toBe("2026-01-31T00:00:00.000Z")
    expect(parseIsoDate("2026-01-31", true)?.toISOString()).toBe("2026-01-31T23:59:59.999Z")
    expect(parseIsoDate("2026-01-31T10:00:00+02:00", true)?.toISOString()).toBe("2026-01-31T08:00:00.000Z")
    expect(parseIsoDate("2026-01-31T10:00:00.123456", false)?.toISOString()).toBe("2026-01-31T10:00:00.123Z")
    for (const bad of ["2026-02-30", "2026-13-01", "yesterday", "2026-01-31T24:00:00", "1706659200", ""]) {
      expect(parseIsoDate(bad, false), bad).toBeUndefined()
    }
  })
})
