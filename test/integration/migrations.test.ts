/**
 * Migrations (docs/deployment.md#upgrading): several instances starting together against one fresh PostgreSQL
 * database must not race. Each migrator below has its own connection pool, as separate
 * instances would.
 */
import { Effect, Layer, Redacted } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { listMigrations } from "../../src/Db/Migrator.ts"
import { Database } from "../../src/Db/Database.ts"
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
