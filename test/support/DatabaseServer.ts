/**
 * A PostgreSQL that a spawned service reaches by `DATABASE_URL`, on any machine: a fresh database on
 * the server of `TEST_DATABASE_URL` when it is set, else the embedded PGlite (a copy of the template
 * cluster) served over the wire protocol on loopback from the test's own process — the same server
 * the service runs for itself without `DATABASE_URL`.
 */
import { Effect, Exit, Option, Redacted, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { embeddedPostgres } from "../../src/Db/Database.ts"
import type { Cleanups } from "./Launcher.ts"
import { hostPort, startTcpProxy, type TcpProxy } from "./TcpProxy.ts"
import { createPostgresDatabase, seedEmbeddedDatabase, TEST_DATABASE_URL, type TestDatabase } from "./TestApp.ts"

export interface DatabaseServer {
  readonly url: string
  readonly close: () => Promise<void>
}

export const startDatabaseServer = async (): Promise<DatabaseServer> => {
  if (TEST_DATABASE_URL !== undefined) {
    const db = await createPostgresDatabase(TEST_DATABASE_URL)
    return { url: db.url!, close: db.dispose }
  }
  const root = mkdtempSync(join(tmpdir(), "ads-dbserver-"))
  seedEmbeddedDatabase(root)
  const scope = Effect.runSync(Scope.make())
  const embedded = await Effect.runPromise(
    Scope.provide(embeddedPostgres({ dataDir: Option.some(join(root, "pgdata")), maxConnections: 64 }), scope)
  )
  return {
    url: Redacted.value(embedded.url),
    close: async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      rmSync(root, { recursive: true, force: true })
    }
  }
}

/** A fresh database on TEST_DATABASE_URL's server, reached through a TCP proxy the test can cut or blackhole; `cleanups` closes both. */
export const proxiedDatabase = async (cleanups: Cleanups): Promise<{ db: TestDatabase; proxy: TcpProxy }> => {
  const db = await createPostgresDatabase(TEST_DATABASE_URL!)
  const { host, port } = hostPort(db.url!)
  const proxy = await startTcpProxy(host, port)
  cleanups.push(async () => {
    await proxy.close()
    await db.dispose()
  })
  return { db, proxy }
}
