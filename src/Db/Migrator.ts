/**
 * Plain-SQL migrations from `migrations/NNNN_name.sql`, applied in one transaction under a
 * PostgreSQL advisory lock, so instances starting together never race (issue: foundation §3).
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { readdir, readFile } from "node:fs/promises"
import { basename, join } from "node:path"
import { StatementTimeoutMs } from "./Deadline.ts"

/** An arbitrary, fixed key: every instance of this service contends for the same lock. */
const MIGRATION_LOCK_KEY = 727_172_001

export interface MigrationFile {
  readonly id: number
  readonly name: string
  readonly path: string
}

export const listMigrations = (dir: string) =>
  Effect.promise(() => readdir(dir)).pipe(
    Effect.map((files) =>
      files.flatMap((file): Array<MigrationFile> => {
        const match = /^(\d+)_([\w-]+)\.sql$/.exec(file)
        return match ? [{ id: Number(match[1]), name: match[2]!, path: join(dir, file) }] : []
      }).sort((a, b) => a.id - b.id)
    )
  )

/** A dollar-quote opener (`$$`, `$body$`) at `at`, not inside an identifier (`a$b$`) or after a `$n`. */
const dollarTagAt = (text: string, at: number): string | undefined => {
  if (/[\w$]/.test(text[at - 1] ?? "")) return undefined
  const tag = /\$(?:[A-Za-z_\u0080-\uffff][\w\u0080-\uffff]*)?\$/y
  tag.lastIndex = at
  return tag.exec(text)?.[0]
}

/**
 * The statements of a migration file, in order. The driver speaks the extended protocol, which
 * takes one statement per Parse ("cannot insert multiple commands into a prepared statement"),
 * so a file is split on the `;` that are outside quotes ('…', E'…', "…", $tag$…$tag$) and
 * comments (`--`, nested `/* *\/`). Comment-only pieces are dropped.
 */
const splitStatements = (text: string): Array<string> => {
  const statements: Array<string> = []
  const n = text.length
  let start = 0
  let meaningful = false
  let i = 0
  const skipQuoted = (quote: string, backslashEscapes: boolean) => {
    i++
    while (i < n) {
      const c = text[i]
      if (backslashEscapes && c === "\\") i += 2
      else if (c === quote && text[i + 1] === quote) i += 2
      else if (c === quote) return void i++
      else i++
    }
  }
  while (i < n) {
    const c = text[i]!
    if (c === "-" && text[i + 1] === "-") {
      const end = text.indexOf("\n", i)
      i = end === -1 ? n : end + 1
    } else if (c === "/" && text[i + 1] === "*") {
      let depth = 1
      i += 2
      while (i < n && depth > 0) {
        if (text.startsWith("/*", i)) {
          depth++
          i += 2
        } else if (text.startsWith("*/", i)) {
          depth--
          i += 2
        } else {
          i++
        }
      }
    } else if (c === "'") {
      meaningful = true
      const prefix = text[i - 1]
      skipQuoted("'", (prefix === "E" || prefix === "e") && !/[\w$]/.test(text[i - 2] ?? ""))
    } else if (c === "\"") {
      meaningful = true
      skipQuoted("\"", false)
    } else if (c === "$" && dollarTagAt(text, i) !== undefined) {
      meaningful = true
      const tag = dollarTagAt(text, i)!
      const end = text.indexOf(tag, i + tag.length)
      i = end === -1 ? n : end + tag.length
    } else if (c === ";") {
      if (meaningful) statements.push(text.slice(start, i).trim())
      start = i + 1
      meaningful = false
      i++
    } else {
      if (!/\s/.test(c)) meaningful = true
      i++
    }
  }
  if (meaningful) statements.push(text.slice(start).trim())
  return statements
}

/**
 * Applies the pending migrations; returns the ids applied now. Without the statement deadline
 * (DATABASE_STATEMENT_TIMEOUT_SECONDS), the service's and the server's: an instance waits for
 * another's lock, and a migration may build an index over millions of rows.
 */
export const runMigrations = (dir: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const migrations = yield* listMigrations(dir)
    /** The file being applied, for the failure's words. */
    let current: string | undefined
    return yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`SET LOCAL statement_timeout = 0`
      yield* sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`
      yield* sql`CREATE TABLE IF NOT EXISTS schema_migrations (
        id integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`
      const rows = yield* sql<{ id: number }>`SELECT id FROM schema_migrations`
      const done = new Set(rows.map((r) => r.id))
      const applied: Array<number> = []
      for (const migration of migrations) {
        if (done.has(migration.id)) continue
        current = basename(migration.path)
        const text = yield* Effect.promise(() => readFile(migration.path, "utf8"))
        for (const statement of splitStatements(text)) yield* sql.unsafe(statement).unprepared
        yield* sql`INSERT INTO schema_migrations (id, name) VALUES (${migration.id}, ${migration.name})`
        applied.push(migration.id)
      }
      current = undefined
      return applied
    })).pipe(
      // The server's own reply stays the cause: the FATAL line says which file failed and why
      // (docs/operations.md#exits), not only that a query did.
      Effect.catch((error) => Effect.die(new Error(current === undefined ? "Migration failed" : `Migration ${current} failed`, { cause: error })))
    )
  }).pipe(
    Effect.tap((applied) => applied.length > 0 ? Effect.logInfo(`Applied migrations ${applied.join(", ")}`) : Effect.void),
    Effect.provideService(StatementTimeoutMs, Infinity),
    Effect.withSpan("Db.migrate")
  )
