/**
 * The database: `PgClient` on `DATABASE_URL`, or — with no URL — embedded PostgreSQL (PGlite)
 * persisted in `DATA_DIR`, served over the PostgreSQL wire protocol on loopback so the very same
 * driver, SQL and migrations run in both cases.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import type * as SqlClient from "effect/sql/SqlClient"
import * as SqlError from "effect/sql/SqlError"
import { mkdirSync } from "node:fs"
import { resolve } from "node:path"
import { databaseTimeout } from "./Deadline.ts"
import { makePgClient, PREPARED_STATEMENTS_MAX } from "./Instrumentation.ts"
import { runMigrations } from "./Migrator.ts"

/** Every session of the service carries it (`pg_stat_activity` names the service's sessions). */
export const APPLICATION_NAME = "author-directory-service"

/** Starts PGlite (persisted in `dataDir`, or in memory) behind a loopback socket server. */
export const embeddedPostgres = (options: { readonly dataDir: Option.Option<string>; readonly maxConnections: number }) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const dataDir = Option.map(options.dataDir, (dir) => {
        mkdirSync(dir, { recursive: true })
        return resolve(dir)
      })
      const db = await PGlite.create({
        ...(Option.isSome(dataDir) ? { dataDir: dataDir.value } : {}),
        extensions: { pg_trgm }
      })
      // PGlite is one session behind every socket connection, which ignores their startup
      // parameters: the service's name is set on the session itself.
      await db.exec(`SET application_name TO '${APPLICATION_NAME}'`)
      const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: options.maxConnections })
      await server.start()
      const url = Redacted.make(`postgres://postgres:postgres@${server.getServerConn()}/postgres`)
      return { db, server, url }
    }),
    ({ db, server }) => Effect.promise(async () => {
      await server.stop()
      await db.close()
    })
  )

/** How long opening a connection (and the start-up check) may take. */
const CONNECT_TIMEOUT_MS = 5_000

/**
 * A connection idle this long gets TCP keepalive probes, so one whose peer vanished (a dead host,
 * a dropped route) errors and is replaced instead of waiting in the pool to fail a statement.
 */
const KEEPALIVE = "10 seconds"

export interface ClientOptions {
  /** Named prepared statements (Db/Instrumentation.ts `preparable`): only for a real server, where each connection is its own session. */
  readonly prepare?: boolean
  readonly migrationsDir?: string
  /**
   * DATABASE_STATEMENT_TIMEOUT_SECONDS in ms: the service's own deadline for the
   * wait for a connection plus the statement — it holds when the server never answers — and, on
   * a real server, PostgreSQL's `statement_timeout` for each session, so the server also stops a
   * statement the service gave up on.
   */
  readonly statementTimeoutMs?: number
}

/** The default of DATABASE_STATEMENT_TIMEOUT_SECONDS. */
const STATEMENT_TIMEOUT_MS = 5_000

/**
 * Our measured `PgClient` (Db/Instrumentation.ts) on a URL. Connections open lazily, so it is
 * checked with `SELECT 1` before the layer is ready: a wrong URL stops start-up.
 */
const connectedClient = (url: Redacted.Redacted<string>, maxConnections: number, options: ClientOptions) => {
  const statementMs = options.statementTimeoutMs ?? STATEMENT_TIMEOUT_MS
  return Effect.tap(
    makePgClient({
      url,
      maxConnections,
      applicationName: APPLICATION_NAME,
      connectTimeout: Duration.millis(CONNECT_TIMEOUT_MS),
      keepAlive: KEEPALIVE,
      prepare: options.prepare ?? false,
      preparedStatementCacheSize: PREPARED_STATEMENTS_MAX,
      // The server's own timer, in every session (PGlite, embedded, ignores it).
      startupParameters: { statement_timeout: String(statementMs) }
    }, { statementMs }),
    (client) => client`SELECT 1`.pipe(Effect.timeoutOrElse({ duration: CONNECT_TIMEOUT_MS, orElse: () => Effect.fail(databaseTimeout("acquire", CONNECT_TIMEOUT_MS)) }))
  )
}

/**
 * A `PgClient` (and `SqlClient`) on a URL, with migrations applied before the layer is ready.
 * `maxConnections`: the pool's size (DATABASE_POOL_MAX).
 */
const layer = (
  url: Redacted.Redacted<string>,
  maxConnections: number,
  options: ClientOptions = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, SqlError.SqlError> =>
  Layer.effectDiscard(runMigrations(options.migrationsDir ?? "migrations")).pipe(
    Layer.provideMerge(PgClient.layerFrom(connectedClient(url, maxConnections, options)))
  )

/**
 * The same client on embedded PostgreSQL (PGlite) persisted in `dataDir`, started with the layer
 * and stopped with it.
 */
const layerEmbedded = (
  dataDir: string,
  maxConnections: number,
  options: ClientOptions = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, SqlError.SqlError> =>
  Layer.unwrap(Effect.map(
    // pglite-socket closes a connection beyond its maximum during the startup handshake ("Connection
    // closed during startup" → 500s while the pool grew under load: the sockets of connections the
    // pool already let go were still counted there). Its connections all share PGlite's one
    // session, so headroom costs nothing; the pool's own size stays `maxConnections`.
    embeddedPostgres({ dataDir: Option.some(dataDir), maxConnections: Math.max(64, maxConnections * 4) }),
    (embedded) => layer(embedded.url, maxConnections, { ...options, prepare: false })
  ))

/**
 * The database's Layers (`SqlClient` + `PgClient`): `layer` on a server's URL (DATABASE_URL),
 * `layerEmbedded` on PGlite (no DATABASE_URL). App.ts chooses.
 */
export const Database = { layer, layerEmbedded } as const
