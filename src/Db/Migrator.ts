/**
 * Plain-SQL migrations from `migrations/NNNN_name.sql`, applied in one transaction under a
 * PostgreSQL advisory lock, so instances starting together never race (issue: foundation §3).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { readdir, readFile } from "node:fs/promises"
import { join } from "node:path"

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

/** Applies the pending migrations; returns the ids applied now. */
export const runMigrations = (dir: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const migrations = yield* listMigrations(dir)
    return yield* sql.withTransaction(Effect.gen(function*() {
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
        const text = yield* Effect.promise(() => readFile(migration.path, "utf8"))
        yield* sql.unsafe(text)
        yield* sql`INSERT INTO schema_migrations (id, name) VALUES (${migration.id}, ${migration.name})`
        applied.push(migration.id)
      }
      return applied
    }))
  }).pipe(
    Effect.tap((applied) => applied.length > 0 ? Effect.logInfo(`Applied migrations ${applied.join(", ")}`) : Effect.void),
    Effect.orDieWith((error) => new Error(`Migration failed: ${String(error)}`)),
    Effect.withSpan("Db.migrate")
  )
