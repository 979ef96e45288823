/**
 * The audit writer's INSERT (AuditLogs/Repo.ts `insertBatch`): one statement of `unnest`ed column
 * arrays for every batch size. A batch of 1 and a batch of 500 store exactly the rows the multi-row
 * `INSERT … VALUES` of the previous version stored for the same records (written out below as the
 * reference, with its own reduction of values PostgreSQL refuses), NUL bytes, lone surrogates,
 * oversized text and captured request_data included; re-inserting is a no-op (by entry id); a
 * value a column refuses fails the statement with the server's SQLSTATE (the poison-record path
 * needs it); and one prepared statement serves every batch size. On the embedded database
 * (PGlite) and on PostgreSQL.
 */
import { Effect, Exit, Layer, Option, Redacted, Scope } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AuditEntry, StoredEntry } from "../../src/AuditLogs/Entry.ts"
import { AuditRepo } from "../../src/AuditLogs/Repo.ts"
import { captureRequestData } from "../../src/AuditLogs/RequestData.ts"
import { INDEXED_TEXT_MAX_BYTES, storableText, TEXT_MAX_BYTES } from "../../src/AuditLogs/Storable.ts"
import { isOutage } from "../../src/AuditLogs/Inserter.ts"
import { Database, embeddedPostgres } from "../../src/Db/Database.ts"
import { sqlStateOf } from "../../src/Db/Instrumentation.ts"
import { createPostgresDatabase, TEST_DATABASE_URL } from "../support/TestApp.ts"

// ---- The previous version's reduction and statement, as the reference ----

const replaceUnstorable = (text: string): string =>
  // eslint-disable-next-line no-control-regex -- NUL is exactly what must be matched
  text.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd")
const storableValue = (value: unknown): unknown => {
  if (typeof value === "string") return replaceUnstorable(value)
  if (Array.isArray(value)) return value.map(storableValue)
  if (value instanceof Date || typeof value !== "object" || value === null) return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) out[replaceUnstorable(k)] = storableValue(v)
  return out
}
const storableJson = (value: unknown, maxBytes: number): string => {
  const json = JSON.stringify(storableValue(value)) ?? "{}"
  return Buffer.byteLength(json, "utf8") <= maxBytes ? json : JSON.stringify({ _truncated: true })
}
const int = (n: number) => Number.isFinite(n) ? Math.max(-2147483648, Math.min(2147483647, Math.round(n))) : 0
/** The previous version's row: request_data an object, serialized here (now: the captured text itself). */
const previousRow = ({ entry: e, entryId }: StoredEntry) => ({
  entry_id: entryId,
  timestamp: e.timestamp,
  user_id: storableText(e.user_id, INDEXED_TEXT_MAX_BYTES),
  username: storableText(e.username, INDEXED_TEXT_MAX_BYTES),
  user_roles: storableJson(e.user_roles.slice(0, 64).map((r) => storableText(r, 256)), Infinity),
  action_type: storableText(e.action_type, INDEXED_TEXT_MAX_BYTES),
  resource: storableText(e.resource, INDEXED_TEXT_MAX_BYTES),
  outcome: e.outcome,
  ip_address: storableText(e.ip_address, TEXT_MAX_BYTES),
  user_agent: storableText(e.user_agent, TEXT_MAX_BYTES),
  request_id: storableText(e.request_id, TEXT_MAX_BYTES),
  correlation_id: storableText(e.correlation_id, TEXT_MAX_BYTES),
  response_status: int(e.response_status),
  duration_ms: int(e.duration_ms),
  request_data: storableJson(typeof e.request_data === "string" ? JSON.parse(e.request_data) : e.request_data, 16_384),
  error_message: e.error_message === null ? null : storableText(e.error_message, TEXT_MAX_BYTES)
})

/** The previous statement for these records (a multi-row VALUES, 16 parameters a row). */
const previousInsert = (sql: SqlClient.SqlClient, batch: ReadonlyArray<StoredEntry>) => {
  const [first, ...rest] = batch.map((s): Record<string, unknown> => previousRow(s))
  return sql`INSERT INTO audit_logs ${sql.insert([first!, ...rest])} ON CONFLICT (entry_id) DO NOTHING`
}

// ---- Records a client can cause ----

const nasty = [
  "plain",
  "nul\u0000byte",
  "lone \ud800 high and \udc00 low",
  "pair 😀 kept",
  "雨".repeat(2000),
  "x".repeat(5000),
  "quote \" backslash \\ \\u0000 as text",
  ""
]

const entryOf = (n: number, run: string): StoredEntry => {
  const text = nasty[n % nasty.length]!
  const entry: AuditEntry = {
    timestamp: new Date(Date.UTC(2026, 0, 1, n % 24, n % 60, n % 60, n % 1000)),
    user_id: n % 3 === 0 ? text : `user-${n}`,
    username: n % 5 === 0 ? text : `name-${n}`,
    user_roles: n % 4 === 0 ? [text, "admin", "\u0000"] : n % 4 === 1 ? [] : ["reader"],
    action_type: n % 7 === 0 ? `WS:${text}` : "GET",
    resource: n % 2 === 0 ? `/authors/${text}` : `/authors/${n}`,
    outcome: n % 11 === 0 ? "permission_denied" : n % 3 === 0 ? "error" : "success",
    ip_address: n % 6 === 0 ? text : "127.0.0.1",
    user_agent: text,
    request_id: `${run}-${n}`,
    correlation_id: n % 9 === 0 ? text : "corr",
    response_status: n % 3 === 0 ? 500 : 200,
    duration_ms: n === 1 ? 1e12 : n === 2 ? Number.NaN : n * 1.5,
    request_data: n % 8 === 0
      ? { query: { format: "json" } }
      : captureRequestData(n % 2 === 0 ? { q: text } : undefined, n % 3 === 0 ? { [`k${text}`]: [text, { deep: text }], password: "p" } : undefined),
    error_message: n % 3 === 0 ? `failed: ${text}` : null
  }
  return { entryId: randomUUID(), entry }
}

const COLUMNS = `"timestamp", user_id, username, user_roles::text AS user_roles, action_type, resource, outcome, ip_address,
  user_agent, request_id, correlation_id, response_status, duration_ms, request_data::text AS request_data, error_message`

const setups = [
  { name: "embedded", url: undefined as string | undefined },
  ...(TEST_DATABASE_URL !== undefined ? [{ name: "postgres", url: TEST_DATABASE_URL }] : [])
]

describe.each(setups)("audit batch INSERT ($name)", (setup) => {
  let run: <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient | AuditRepo>) => Promise<A>
  let dispose: () => Promise<void>

  beforeAll(async () => {
    let database: Layer.Layer<SqlClient.SqlClient, unknown>
    let drop = async () => {}
    if (setup.url === undefined) {
      database = Layer.unwrap(Effect.map(
        embeddedPostgres({ dataDir: Option.none(), maxConnections: 8 }),
        ({ url }) => Database.layer(url, 1)
      ))
    } else {
      const db = await createPostgresDatabase(setup.url)
      // One connection, prepared statements on: its prepared statements are visible to it.
      database = Database.layer(Redacted.make(db.url!), 1, { prepare: true })
      drop = db.dispose
    }
    const scope = Effect.runSync(Scope.make())
    const context = await Effect.runPromise(Layer.buildWithScope(AuditRepo.layer.pipe(Layer.provideMerge(database)), scope))
    run = (effect) => Effect.runPromise(Effect.provide(effect, context))
    dispose = async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await drop()
    }
  })
  afterAll(() => dispose())

  /** The stored rows of these request ids, in the order they were inserted. */
  const rowsOf = (requestIds: ReadonlyArray<string>) =>
    run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<Record<string, unknown>>`SELECT ${sql.literal(COLUMNS)} FROM audit_logs WHERE request_id IN ${sql.in(requestIds)} ORDER BY id`))

  it.each([1, 500])("a batch of %i stores exactly the rows the previous multi-row INSERT stored", async (size) => {
    const tag = randomUUID().slice(0, 8)
    const before = Array.from({ length: size }, (_, n) => entryOf(n, `${tag}-before`))
    const now = before.map(({ entry }) => ({ entryId: randomUUID(), entry: { ...entry, request_id: entry.request_id.replace("-before-", "-now-") } }))
    await run(Effect.flatMap(SqlClient.SqlClient, (sql) => previousInsert(sql, before)))
    await run(Effect.flatMap(AuditRepo, (repo) => repo.insertBatch(now)))

    const reference = await rowsOf(before.map((s) => s.entry.request_id))
    const stored = await rowsOf(now.map((s) => s.entry.request_id))
    expect(reference).toHaveLength(size)
    expect(stored.map((row) => ({ ...row, request_id: String(row["request_id"]).replace("-now-", "-before-") }))).toEqual(reference)
    // Spot checks of the reductions, so an equal but wrong reference cannot pass unnoticed.
    const strings = stored.flatMap((row) => Object.values(row).filter((v): v is string => typeof v === "string"))
    expect(strings.filter((v) => v.includes("\u0000") || !(v as string & { isWellFormed(): boolean }).isWellFormed())).toEqual([])
    if (size === 500) {
      expect(stored.some((row) => String(row["user_agent"]).includes("nul\ufffdbyte"))).toBe(true)
      expect(stored.some((row) => String(row["request_data"]).includes("lone \ufffd high and \ufffd low"))).toBe(true)
    }
  })

  it("re-inserting a batch stores nothing twice (entry id), also a record repeated within a batch", async () => {
    const tag = randomUUID().slice(0, 8)
    const batch = Array.from({ length: 30 }, (_, n) => entryOf(n, tag))
    await run(Effect.flatMap(AuditRepo, (repo) => repo.insertBatch([...batch, batch[0]!])))
    await run(Effect.flatMap(AuditRepo, (repo) => repo.insertBatch(batch.slice(10))))
    const rows = await rowsOf(batch.map((s) => s.entry.request_id))
    expect(rows.map((row) => row["request_id"])).toEqual(batch.map((s) => s.entry.request_id))
  })

  it("a value a column refuses fails the batch with the server's SQLSTATE, not as an outage", async () => {
    const tag = randomUUID().slice(0, 8)
    const batch = [entryOf(1, tag), { ...entryOf(2, tag), entryId: "not-a-uuid" }]
    const failure = await run(Effect.flip(Effect.flatMap(AuditRepo, (repo) => repo.insertBatch(batch))))
    expect(sqlStateOf(failure)).toBe("22P02")
    expect(isOutage(failure)).toBe(false)
    expect(await rowsOf(batch.map((s) => s.entry.request_id))).toEqual([])
  })

  // PostgreSQL's own prepared statements: only where the setup is a PostgreSQL server.
  if (setup.url !== undefined) {
    it("one prepared statement serves every batch size", async () => {
      const tag = randomUUID().slice(0, 8)
      const sizes = [1, 2, 23, 24, 500]
      for (const size of sizes) {
        await run(Effect.flatMap(AuditRepo, (repo) => repo.insertBatch(Array.from({ length: size }, (_, n) => entryOf(n, `${tag}-${size}`)))))
      }
      const prepared = await run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO audit_logs%unnest(%'`))
      expect(prepared).toEqual([{ n: 1 }])
      // The previous statement, for the record: one text per batch size, prepared up to 2,000 characters.
      const previous = await run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.forEach(sizes, (size) =>
          Effect.sync(() => previousInsert(sql, Array.from({ length: size }, (_, n) => entryOf(n, tag))).compile()[0].length))))
      console.log(`[audit insert] statement text by batch size ${sizes.join("/")}: previous ${previous.join("/")} characters (prepared up to 2,000), now one of ${
        (await run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT length(statement)::int AS n FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO audit_logs%unnest(%'`)))[0]!.n
      } characters, prepared once`)
    })
  }
})
