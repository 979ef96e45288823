/**
 * The connections this instance holds (docs/websocket.md#limits): every socket from upgrade to end, the open
 * (authenticated) ones by id, the heartbeat that drops dead peers, and the shutdown that closes
 * every connection 1001 and cuts the sockets that do not answer.
 */
import { Effect, Schedule } from "effect"
import type { Connection } from "./Connection.ts"
import { Close } from "./Protocol.ts"

/** Dead peers (no pong to a ping) are dropped after at most two of these. */
const HEARTBEAT = "30 seconds"
/** At shutdown, clients get this long to answer the 1001 close before their sockets are cut. */
export const CLOSE_GRACE_MS = 2_000

export const makeSockets = () => {
  const sockets = new Set<Connection>()
  const open = new Map<string, Connection>()
  let shuttingDown: Promise<void> | undefined
  let allEnded: (() => void) | undefined

  return {
    /** Sockets held, handshakes included (WS_MAX_CONNECTIONS counts them). */
    size: () => sockets.size,
    add: (conn: Connection) => void sockets.add(conn),
    opened: (conn: Connection) => void open.set(conn.id, conn),
    /** An open connection by id. */
    get: (id: string) => open.get(id),
    /** The open connections (broadcasts go to them). */
    open: () => open.values(),
    ended: (conn: Connection) => {
      sockets.delete(conn)
      open.delete(conn.id)
      if (allEnded !== undefined && sockets.size === 0) allEnded()
    },
    isShuttingDown: () => shuttingDown !== undefined,
    /** docs/operations.md#shutdown: every connection closes 1001; sockets that do not answer are cut. Resolves when all ended. */
    shutdown: () =>
      shuttingDown ??= new Promise<void>((resolve) => {
        if (sockets.size === 0) return resolve()
        allEnded = resolve
        for (const conn of sockets) conn.close(Close.ShuttingDown)
        setTimeout(() => {
          for (const conn of sockets) conn.terminate()
        }, CLOSE_GRACE_MS).unref()
      }),
    /** Pings every socket each HEARTBEAT; one that did not answer the last ping is cut. Runs until interrupted. */
    heartbeat: Effect.repeat(
      Effect.sync(() => {
        for (const conn of sockets) if (!conn.ping()) conn.terminate()
      }),
      Schedule.spaced(HEARTBEAT)
    )
  } as const
}

export type Sockets = ReturnType<typeof makeSockets>
