/**
 * Named prepared statements (Db/Instrumentation.ts, DATABASE_PREPARED_STATEMENTS) on a real
 * PostgreSQL: a parameterised statement is prepared once per connection and reused; statements
 * without parameters are not prepared; a plan invalidated by a schema change is run again
 * unprepared, so the caller never sees the error; and with the setting off nothing is prepared.
 * (Embedded PGlite never prepares — its connections share one session: every embedded suite
 * would fail with "prepared statement already exists" otherwise.)
 */
import { SqlClient } from "@effect/sql"
import { Effect, Redacted } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { pgClientLayer } from "../../src/Db/Database.ts"
import { makeStatementNames } from "../../src/Db/Instrumentation.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

describe("statement names", () => {
  it("one name per distinct text, none past the bound or for long texts, none once invalidated", () => {
    const names = makeStatementNames(2, 40)
    expect(names.nameOf("SELECT $1")).toBe("ads_1")
    expect(names.nameOf("SELECT $1")).toBe("ads_1")
    expect(names.nameOf("SELECT $1, $2")).toBe("ads_2")
    expect(names.nameOf("SELECT $1, $2, $3")).toBeUndefined()
    expect(makeStatementNames(10, 40).nameOf(`SELECT ${"$1, ".repeat(20)}1`)).toBeUndefined()
    names.invalidated("SELECT $1")
    expect(names.nameOf("SELECT $1")).toBeUndefined()
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
    Effect.runPromise(program.pipe(Effect.provide(pgClientLayer(Redacted.make(db.url!), 1, { prepare })), Effect.scoped) as Effect.Effect<A>)

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
    expect(statements.every((s) => s.name.startsWith("ads_"))).toBe(true)
    expect(texts).not.toContain("SELECT name, statement FROM pg_prepared_statements ORDER BY name") // no parameters
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
