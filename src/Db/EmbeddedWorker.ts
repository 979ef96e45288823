/**
 * The embedded database's thread (Db/Database.ts `embeddedPostgres` starts it): PGlite and its
 * loopback socket server, off the service's event loop. PGlite's start (compiling its WebAssembly,
 * initialising a data directory) and every query it runs are synchronous work of seconds at a
 * time; here they never hold up the probes or the requests (docs/operations.md#starting).
 *
 * Messages: in `{ type: "stop" }`; out `{ type: "ready", address }` once the socket server
 * listens, `{ type: "stopped" }` once the server and PGlite are closed. A failure to start ends
 * the thread with the error (the `error` event of its Worker).
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { parentPort, workerData } from "node:worker_threads"

export interface EmbeddedWorkerData {
  /** An absolute directory, or undefined for a database in memory. */
  readonly dataDir: string | undefined
  readonly maxConnections: number
  readonly applicationName: string
}

export type EmbeddedWorkerMessage =
  | { readonly type: "ready"; readonly address: string }
  | { readonly type: "stopped" }

const port = parentPort
if (port === null) throw new Error("Db/EmbeddedWorker.ts runs as a worker thread (Db/Database.ts embeddedPostgres)")
const options = workerData as EmbeddedWorkerData

const db = await PGlite.create({
  ...(options.dataDir !== undefined ? { dataDir: options.dataDir } : {}),
  extensions: { pg_trgm }
})
// PGlite is one session behind every socket connection, which ignores their startup parameters:
// the service's name is set on the session itself, so its writes are its own.
await db.exec(`SET application_name TO '${options.applicationName}'`)
const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: options.maxConnections })
await server.start()

port.on("message", (message: { readonly type: "stop" }) => {
  if (message.type !== "stop") return
  void (async () => {
    await server.stop()
    await db.close()
    port.postMessage({ type: "stopped" } satisfies EmbeddedWorkerMessage)
    port.close()
  })()
})
port.postMessage({ type: "ready", address: server.getServerConn() } satisfies EmbeddedWorkerMessage)
