/**
 * The database: `PgClient` on `DATABASE_URL`, or — with no URL — embedded PostgreSQL (PGlite)
 * persisted in `DATA_DIR`, served over the PostgreSQL wire protocol on loopback so the very same
 * driver, SQL and migrations run in both cases (ARCHITECTURE §The shape).
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { SqlClient, SqlError } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Option, Redacted } from "effect"
import { mkdirSync } from "node:fs"
import { join, resolve } from "node:path"
import pg from "pg"
import { AppConfig } from "../Config.ts"
import { instrumentPool } from "./Instrumentation.ts"
import { runMigrations } from "./Migrator.ts"

export interface EmbeddedPg {
  readonly url: Redacted.Redacted<string>
}

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

const APPLICATION_NAME = "author-directory-service"

/**
 * Our own `pg` pool (instead of `PgClient.layer`'s) so the SQL layer can be measured where every
 * statement passes (Db/Instrumentation.ts); checked with `SELECT 1` like `PgClient.layer` does.
 */
const instrumentedPool = (url: Redacted.Redacted<string>, maxConnections: number, prepare: boolean) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const pool = instrumentPool(new pg.Pool({ connectionString: Redacted.value(url), max: maxConnections, application_name: APPLICATION_NAME }), { prepare })
      pool.on("error", () => {}) // an idle client's failure; the next statement reports it
      return pool
    }),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
  ).pipe(
    Effect.tap((pool) =>
      Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError.SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(Effect.timeoutFail({
        duration: "5 seconds",
        onTimeout: () => new SqlError.SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
      }))
    )
  )

/**
 * A `PgClient` on a URL, with migrations applied before the layer is ready. `prepare`: named
 * prepared statements (Db/Instrumentation.ts) — only for a real server, where each connection is
 * its own session.
 */
export const pgClientLayer = (url: Redacted.Redacted<string>, maxConnections: number, options: { readonly prepare?: boolean; readonly migrationsDir?: string } = {}) =>
  Layer.effectDiscard(runMigrations(options.migrationsDir ?? "migrations")).pipe(
    Layer.provideMerge(PgClient.layerFromPool({ acquire: instrumentedPool(url, maxConnections, options.prepare ?? false), applicationName: APPLICATION_NAME }))
  )

export type DatabaseKind = "postgres" | "embedded"

/** `SqlClient` + `PgClient` from the configuration; says which kind it started. */
export const DatabaseLive = Layer.unwrapScoped(
  Effect.gen(function*() {
    const config = yield* AppConfig
    if (Option.isSome(config.databaseUrl)) {
      return pgClientLayer(config.databaseUrl.value, config.databasePoolMax, { prepare: config.databasePreparedStatements })
    }
    // One extra connection for LISTEN or a reserved client; pglite-socket refuses beyond its maximum.
    const embedded = yield* embeddedPostgres({
      dataDir: Option.some(join(config.dataDir, "pgdata")),
      maxConnections: config.databasePoolMax + 2
    })
    return pgClientLayer(embedded.url, config.databasePoolMax)
  })
)

export type Sql = SqlClient.SqlClient
