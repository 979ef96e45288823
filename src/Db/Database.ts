/**
 * The database: `PgClient` on `DATABASE_URL`, or — with no URL — embedded PostgreSQL (PGlite)
 * persisted in `DATA_DIR`, served over the PostgreSQL wire protocol on loopback so the very same
 * driver, SQL and migrations run in both cases. PGlite runs in a thread of its own
 * (Db/EmbeddedWorker.ts), one process at a time per directory (Db/DataDirLock.ts).
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Duration, Effect, Layer, Option, Redacted, type Scope } from "effect"
import type * as SqlClient from "effect/sql/SqlClient"
import * as SqlError from "effect/sql/SqlError"
import { mkdirSync } from "node:fs"
import { extname, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { Worker } from "node:worker_threads"
import { type EmbeddedDatabaseInUse, lockDataDir } from "./DataDirLock.ts"
import { databaseTimeout } from "./Deadline.ts"
import type { EmbeddedWorkerData, EmbeddedWorkerMessage } from "./EmbeddedWorker.ts"
import { makePgClient, PREPARED_STATEMENTS_MAX } from "./Instrumentation.ts"
import { runMigrations } from "./Migrator.ts"

/** Every session of the service carries it (`pg_stat_activity` names the service's sessions). */
export const APPLICATION_NAME = "author-directory-service"

/** The worker's module beside this one: `.ts` when run from the sources, `.js` from `dist/`. */
const WORKER = new URL(`./EmbeddedWorker${extname(fileURLToPath(import.meta.url))}`, import.meta.url)

/**
 * How long closing waits for PGlite to close its files before the thread is ended anyway (as a
 * crash would: PostgreSQL recovers from its WAL at the next start). Part of the 10 s of
 * docs/operations.md#shutdown.
 */
const STOP_TIMEOUT_MS = 1_500

/** PGlite failed to start (a damaged data directory, a failed initialisation): its own words. */
const startFailed = (error: unknown) =>
  new Error(`The embedded database did not start: ${error instanceof Error ? error.message : String(error)}`, { cause: error })

/** Starts the worker and waits for its socket server's address. */
const startWorker = (data: EmbeddedWorkerData) =>
  Effect.callback<{ readonly worker: Worker; readonly address: string }>((resume) => {
    const worker = new Worker(WORKER, { workerData: data })
    const onMessage = (message: EmbeddedWorkerMessage) => {
      if (message.type !== "ready") return
      settle()
      resume(Effect.succeed({ worker, address: message.address }))
    }
    const onError = (error: unknown) => {
      settle()
      resume(Effect.die(startFailed(error)))
    }
    const onExit = (code: number) => onError(new Error(`its thread exited (${code})`))
    const settle = () => {
      worker.off("message", onMessage).off("error", onError).off("exit", onExit)
    }
    // Once it is ready, nothing listens to the thread's `error` any more: should PGlite fail while
    // serving, the error ends the process, as it did when PGlite ran in the service's own thread.
    worker.on("message", onMessage).on("error", onError).on("exit", onExit)
    // Interrupted while starting (a shutdown during start-up): the thread ends with it.
    return Effect.promise(async () => {
      settle()
      await worker.terminate()
    })
  })

/** Asks the worker to close PGlite; ends the thread if it has not within STOP_TIMEOUT_MS. */
const stopWorker = (worker: Worker) =>
  Effect.promise(() =>
    new Promise<void>((done) => {
      // -1: the thread has ended already.
      if (worker.threadId === -1) return done()
      const timer = setTimeout(() => void worker.terminate(), STOP_TIMEOUT_MS)
      worker.once("exit", () => {
        clearTimeout(timer)
        done()
      })
      // A failure while closing ends the thread too (its `exit` follows).
      worker.on("error", () => void worker.terminate())
      worker.postMessage({ type: "stop" })
    })
  )

/**
 * Starts PGlite (persisted in `dataDir`, or in memory) behind a loopback socket server, in a worker
 * thread: the service's event loop keeps answering (the probes while it starts) and the database
 * works on another core. A directory is locked for the scope first: a second process on it is
 * refused (`EmbeddedDatabaseInUse`).
 */
export const embeddedPostgres = (options: {
  readonly dataDir: Option.Option<string>
  readonly maxConnections: number
}): Effect.Effect<{ readonly url: Redacted.Redacted<string> }, EmbeddedDatabaseInUse, Scope.Scope> =>
  Effect.gen(function*() {
    const dataDir = Option.getOrUndefined(Option.map(options.dataDir, (dir) => {
      mkdirSync(dir, { recursive: true })
      return resolve(dir)
    }))
    if (dataDir !== undefined) yield* lockDataDir(dataDir)
    const { address } = yield* Effect.acquireRelease(
      startWorker({ dataDir, maxConnections: options.maxConnections, applicationName: APPLICATION_NAME }),
      ({ worker }) => stopWorker(worker)
    )
    return { url: Redacted.make(`postgres://postgres:postgres@${address}/postgres`) }
  })

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
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, SqlError.SqlError | EmbeddedDatabaseInUse> =>
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
