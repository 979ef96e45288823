/**
 * Migrations (docs/deployment.md#upgrading): several instances starting together against one fresh PostgreSQL
 * database must not race. Each migrator below has its own connection pool, as separate
 * instances would.
 */
import { Effect, Exit, Layer, Redacted } from "effect"
import { copyFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { listMigrations } from "../../src/Db/Migrator.ts"
import { Database } from "../../src/Db/Database.ts"
import { exitReason } from "../../src/Startup.ts"
import { startDatabaseServer } from "../support/DatabaseServer.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

describe.runIf(TEST_DATABASE_URL !== undefined)("migrations on PostgreSQL", () => {
  let db: TestDatabase
  beforeAll(async () => {
    db = await createPostgresDatabase(TEST_DATABASE_URL!)
  })
  afterAll(() => db.dispose())

  const migrate = (url: string) =>
    Effect.runPromise(Effect.scoped(Layer.build(Database.layer(Redacted.make(url), 2))).pipe(Effect.asVoid))

  it("four migrators started together on a fresh database all succeed; each version is applied once", async () => {
    const url = db.url!
    const results = await Promise.allSettled([migrate(url), migrate(url), migrate(url), migrate(url)])
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled", "fulfilled"])

    const expected = await Effect.runPromise(listMigrations("migrations"))
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      const rows = (await client.query<{ id: number; n: string }>("SELECT id, count(*) AS n FROM schema_migrations GROUP BY id ORDER BY id")).rows
      expect(rows.map((r) => r.id)).toEqual(expected.map((m) => m.id))
      expect(rows.every((r) => Number(r.n) === 1)).toBe(true)
      const table = await client.query("SELECT to_regclass('public.authors') AS t")
      expect(table.rows[0]).toEqual({ t: "authors" })
    } finally {
      await client.end()
    }
    // A later start finds nothing to do and still succeeds.
    await expect(migrate(url)).resolves.toBeUndefined()
  })
})

describe("a migration the database refuses (docs/operations.md#exits)", () => {
  it("stops start-up naming the file, with the server's own reply as the cause", async () => {
    const database = await startDatabaseServer()
    const dir = mkdtempSync(join(tmpdir(), "ads-migrations-"))
    try {
      for (const file of readdirSync("migrations")) copyFileSync(join("migrations", file), join(dir, file))
      writeFileSync(join(dir, "9999_needs_an_extension.sql"), "CREATE EXTENSION no_such_extension;\n")
      const exit = await Effect.runPromiseExit(Effect.scoped(Layer.build(Database.layer(Redacted.make(database.url), 1, { migrationsDir: dir }))))
      expect(Exit.isFailure(exit) ? exitReason(exit.cause) : "migrated").toEqual({
        message: "Migration 9999_needs_an_extension.sql failed",
        cause: expect.stringContaining(`extension "no_such_extension"`)
      })
    } finally {
      rmSync(dir, { recursive: true, force: true })
      await database.close()
    }
  })
})
