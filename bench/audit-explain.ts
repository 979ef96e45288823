/**
 * Audit trail at scale (issue 4): in a scratch database on BENCH_DATABASE_URL (or
 * TEST_DATABASE_URL), measures the writer's batch insert (AuditRepo.insertBatch, 500 rows per
 * batch), seeds 1,000,000 records with generate_series, and prints EXPLAIN ANALYZE execution
 * times of `GET /audit-logs` for each filter alone and with a date range — the page query and
 * its exact total, as AuditLogs/Repo.ts issues them. Exits 1 when any plan takes over 100 ms.
 *
 *   TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/audit-explain.ts
 */
import { Effect, Redacted } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import { randomUUID } from "node:crypto"
import pg from "pg"
import type { AuditEntry } from "../src/AuditLogs/Entry.ts"
import { type AuditFilters, AuditRepo, INSERT_BATCH_MAX } from "../src/AuditLogs/Repo.ts"
import { Database } from "../src/Db/Database.ts"
import { AUDIT_SEED, scratchDatabase } from "./lib/audit.ts"

const ROWS = Number(process.env["BENCH_AUDIT_ROWS"] ?? 1_000_000)
const LIMIT_MS = 100
const WRITER_BATCHES = 200

const { adminUrl, name: dbName, url: dbUrl } = scratchDatabase("audit_bench")

const entry = (i: number): AuditEntry => ({
  timestamp: new Date(),
  user_id: `user-${i % 1000}`,
  username: `name-${i % 1000}`,
  user_roles: ["get-authors"],
  action_type: "GET",
  resource: "/authors",
  outcome: "success",
  ip_address: "10.0.0.1",
  user_agent: "bench",
  request_id: randomUUID(),
  correlation_id: "bench0001",
  response_status: 200,
  duration_ms: 3,
  request_data: { query: { page: "1" } },
  error_message: null
})

const DAY = 86_400_000
/** The filters of GET /audit-logs with values the seed makes common (90 %) and rare. */
const filters: ReadonlyArray<readonly [string, AuditFilters]> = [
  ["none", {}],
  ["user_id", { user_id: "user-42" }],
  ["username", { username: "name-42" }],
  ["action_type", { action_type: "POST" }],
  ["resource", { resource: "/authors/7" }],
  ["outcome", { outcome: "permission_denied" }],
  ["outcome (90 %)", { outcome: "success" }],
  ["action_type + outcome", { action_type: "GET", outcome: "success" }]
]
/** A 30-day range whose ends fall inside hours, and a 90 % filter over everything. */
const ranged = (f: AuditFilters): AuditFilters => ({ ...f, from: new Date(Date.now() - 30 * DAY - 1234567), to: new Date(Date.now() - 777777) })

const main = async () => {
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${dbName}`)
  let failed = false
  try {
    // 1. The writer: AuditRepo.insertBatch, as the writer fiber calls it (migrations applied by the layer).
    // The repository's own statements (compiling needs no connection once the pool is gone).
    const statements = await Effect.runPromise(Effect.gen(function*() {
      const repo = yield* AuditRepo
      const started = performance.now()
      for (let b = 0; b < WRITER_BATCHES; b++) {
        yield* repo.insertBatch(Array.from({ length: INSERT_BATCH_MAX }, (_, i) => ({ entryId: randomUUID(), entry: entry(b * INSERT_BATCH_MAX + i) })))
      }
      const seconds = (performance.now() - started) / 1000
      console.log(`writer: ${WRITER_BATCHES} batches of ${INSERT_BATCH_MAX} in ${seconds.toFixed(2)} s = ` +
        `${(WRITER_BATCHES / seconds).toFixed(1)} batches/s, ${Math.round((WRITER_BATCHES * INSERT_BATCH_MAX) / seconds)} records/s`)
      const sql = yield* SqlClient.SqlClient
      yield* sql`TRUNCATE audit_logs`
      return repo.statements
    }).pipe(Effect.provide(AuditRepo.layer), Effect.provide(Database.layer(Redacted.make(dbUrl), 2)), Effect.scoped))

    // 2. 1M rows, then statistics and the visibility map (index-only counts) as autovacuum would leave them.
    const db = new pg.Client({ connectionString: dbUrl })
    await db.connect()
    try {
      const seedStart = performance.now()
      await db.query(AUDIT_SEED, [ROWS, 365])
      await db.query("VACUUM ANALYZE audit_logs")
      console.log(`seeded ${ROWS} rows in ${((performance.now() - seedStart) / 1000).toFixed(1)} s\n`)

      const explain = async (statement: Statement.Statement<object>) => {
        const [text, params] = statement.compile()
        const { rows } = await db.query<{ "QUERY PLAN": Array<{ "Execution Time": number }> }>(
          `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
          params as Array<unknown>
        )
        return rows[0]!["QUERY PLAN"][0]!["Execution Time"]
      }
      console.log("filter".padEnd(40) + "page (ms)".padStart(12) + "total (ms)".padStart(12))
      for (const [name, base] of filters) {
        for (const withRange of [false, true]) {
          const f = withRange ? ranged(base) : base
          const pageMs = await explain(statements.pageRows(f, 1, 20))
          const totalMs = await explain(statements.total(f))
          const over = pageMs > LIMIT_MS || totalMs > LIMIT_MS
          failed ||= over
          console.log(`${(name + (withRange ? " + 30-day range" : "")).padEnd(40)}${pageMs.toFixed(2).padStart(12)}${totalMs.toFixed(2).padStart(12)}${over ? "  OVER" : ""}`)
        }
      }
      // Deep pages cost their offset; the first pages are what an admin reads.
      const deep = await explain(statements.pageRows({}, 500, 20))
      console.log(`${"none, page 500".padEnd(40)}${deep.toFixed(2).padStart(12)}`)
    } finally {
      await db.end()
    }
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
    await admin.end()
  }
  console.log(failed ? `\nFAIL: a plan took over ${LIMIT_MS} ms` : `\nOK: every plan under ${LIMIT_MS} ms`)
  process.exit(failed ? 1 : 0)
}

void main().catch((error: unknown) => {
  console.error(error)
  process.exit(2)
})
