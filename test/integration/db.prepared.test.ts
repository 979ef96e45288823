/**
 * Named prepared statements (Db/Instrumentation.ts, DATABASE_PREPARED_STATEMENTS) on a real
 * PostgreSQL: a parameterised statement is prepared once per connection and reused; statements
 * without parameters are not prepared; each connection holds a bounded set; a plan invalidated by
 * a schema change is run again unprepared, so the caller never sees the error; and with the
 * setting off nothing is prepared.
 * (Embedded PGlite never prepares — its connections share one session: every embedded suite
 * would fail with "prepared statement already exists" otherwise.)
 */
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Database } from "../../src/Db/Database.ts"
import { PREPARED_STATEMENTS_MAX, PREPARED_TEXT_MAX, preparable } from "../../src/Db/Instrumentation.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

// The names, their reuse, the per-connection bound and invalidation are PgClient 4's own
// prepared-statement cache (its size is PREPARED_STATEMENTS_MAX): they are checked on a real
// server below. What is ours is the policy of which statements are named.
describe("statements prepared", () => {
  it("only parameterised ones, none for long texts or pattern matches", () => {
    expect(preparable("SELECT $1", [1])).toBe(true)
    expect(preparable("SELECT $1, $2", [1, 2])).toBe(true)
    expect(preparable("SELECT 1", [])).toBe(false)
    const atBound = `SELECT $1${" ".repeat(PREPARED_TEXT_MAX - "SELECT $1".length)}`
    expect(atBound).toHaveLength(PREPARED_TEXT_MAX)
    expect(preparable(atBound, [1])).toBe(true)
    expect(preparable(`${atBound} `, [1])).toBe(false)
    expect(preparable(`SELECT ${"$1, ".repeat(1000)}1`, [1])).toBe(false)
    // A generic plan cannot see the pattern, so it would never use the trigram index.
    expect(preparable("SELECT id FROM authors WHERE name ILIKE $1 ORDER BY authors.id LIMIT $2", ["%ada%", 1000])).toBe(false)
    expect(preparable("SELECT id FROM authors WHERE name = $1 ORDER BY authors.id LIMIT $2", ["Ada", 1000])).toBe(true)
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("prepared statements on PostgreSQL", () => {
  let db: TestDatabase
  beforeAll(async () => {
    db = await createPostgresDatabase(TEST_DATABASE_URL!)
  })
  afterAll(() => db.dispose())

  /** Runs `program` on a one-connection pool, so every statement shares one session. */
  const onOneConnection = <A>(prepare: boolean, program: Effect.Effect<A, unknown, SqlClient.SqlClient>) =>
    Effect.runPromise(program.pipe(Effect.provide(Database.layer(Redacted.make(db.url!), 1, { prepare })), Effect.scoped) as Effect.Effect<A>)

  const prepared = Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ name: string; statement: string }>`SELECT name, statement FROM pg_prepared_statements ORDER BY name`)

  it("a parameterised statement is prepared once per connection and gives the same rows", async () => {
    const [first, second, statements] = await onOneConnection(true, Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO authors (name) VALUES (${"Prepared Author"})`
      const find = (name: string) => sql<{ name: string }>`SELECT name FROM authors WHERE name = ${name}`
      return [yield* find("Prepared Author"), yield* find("Prepared Author"), yield* prepared] as const
    }))
    expect(first).toEqual([{ name: "Prepared Author" }])
    expect(second).toEqual(first)
    const texts = statements.map((s) => s.statement)
    expect(texts).toContain("SELECT name FROM authors WHERE name = $1")
    expect(texts.filter((t) => t === "SELECT name FROM authors WHERE name = $1")).toHaveLength(1)
    expect(statements.every((s) => /^effect_[0-9a-f]{16}_\d+$/.test(s.name))).toBe(true) // PgClient's names
    expect(texts).not.toContain("SELECT name, statement FROM pg_prepared_statements ORDER BY name") // no parameters
  })

  it("one connection holds at most PREPARED_STATEMENTS_MAX statements; the least recently used is closed", async () => {
    const extra = 5
    const [statements, rows] = await onOneConnection(true, Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // Each text differs (an unsafe fragment), so each is a new statement.
      const texts = Array.from({ length: PREPARED_STATEMENTS_MAX + extra }, (_, i) =>
        sql<{ n: number }>`SELECT ${i}::int AS n /* ${sql.unsafe(String(i))} */`)
      for (const statement of texts) yield* statement
      // One more, which also carries the pending Close of the last eviction.
      const last = yield* sql<{ n: number; label: string }>`SELECT ${1}::int AS n, ${"bound 1"}::text AS label`
      return [yield* prepared, last] as const
    }))
    expect(rows).toEqual([{ n: 1, label: "bound 1" }])
    // A Close waits for the next statement: the set may exceed the bound by the one in flight.
    expect(statements.length).toBeLessThanOrEqual(PREPARED_STATEMENTS_MAX + 1)
    expect(statements.length).toBeGreaterThanOrEqual(PREPARED_STATEMENTS_MAX - 1)
    const texts = statements.map((s) => s.statement)
    expect(texts.some((t) => t.includes("/* 0 */"))).toBe(false) // the oldest were closed
    expect(texts.some((t) => t.includes(`/* ${PREPARED_STATEMENTS_MAX + extra - 1} */`))).toBe(true)
  })

  it("a plan invalidated by a schema change is run again unprepared: the caller gets its rows", async () => {
    const rows = await onOneConnection(true, Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE prepared_probe (id int)`
      yield* sql`INSERT INTO prepared_probe VALUES (1)`
      const all = sql<Record<string, unknown>>`SELECT * FROM prepared_probe WHERE id = ${1}`
      yield* all
      yield* sql`ALTER TABLE prepared_probe ADD COLUMN note text DEFAULT 'added'`
      return yield* all
    }))
    expect(rows).toEqual([{ id: 1, note: "added" }])
  })

  it("with DATABASE_PREPARED_STATEMENTS=false nothing is prepared", async () => {
    const statements = await onOneConnection(false, Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`SELECT name FROM authors WHERE id = ${1}`
      return yield* prepared
    }))
    expect(statements).toEqual([])
  })
})
