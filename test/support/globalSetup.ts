/**
 * Runs once per `vitest run`: builds `dist/` as `npm start` does (the tests that start a real
 * process run what production runs), and initialises one PGlite cluster (the ~3.5 s initdb) that
 * every test app copies, so each test file starts its own embedded database in a fraction of a second.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { buildIfNeeded } from "../../scripts/build.ts"
import { buildClientIfNeeded } from "../../scripts/build-client.ts"

export default async function setup() {
  buildIfNeeded()
  // The client kit's package (packages/client/dist): the client tests import it as a client would.
  await buildClientIfNeeded()
  const root = mkdtempSync(join(tmpdir(), "ads-pglite-template-"))
  const dataDir = join(root, "pgdata")
  const db = await PGlite.create({ dataDir, extensions: { pg_trgm } })
  await db.query("SELECT 1")
  await db.close()
  process.env["ADS_PGLITE_TEMPLATE"] = dataDir
  return () => rmSync(root, { recursive: true, force: true })
}
