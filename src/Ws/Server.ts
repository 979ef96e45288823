/**
 * The `/web` WebSocket endpoint (docs/websocket.md) on the HTTP port: the
 * wiring of its parts. An upgrade becomes a `Connection` (Connection.ts: its state, its bounded
 * outbound queue with one writer, its inbox), is admitted by the `Handshake` (Handshake.ts), and
 * its frames are handled one at a time, in order, by `Dispatch` (Dispatch.ts: rate → schema →
 * permission → handler). What an upgrade passes before its socket exists is UpgradeGate.ts; the
 * sockets held, their heartbeat and the shutdown that closes them 1001 are Sockets.ts; the
 * broadcasts and session expiries the registry delivers, from every instance, are FanOut.ts.
 *
 * Transport is `ws` directly (not the platform's Socket) for its frame-size limit (1009), its
 * send buffer figure and one fiber per message instead of per connection.
 */
import { Effect, FiberSet, Layer } from "effect"
import { randomUUID } from "node:crypto"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { type WebSocket, WebSocketServer } from "ws"
import { AuditLog } from "../AuditLogs/AuditLog.ts"
import { TokenVerifier } from "../Auth/TokenVerifier.ts"
import { AppConfig } from "../Config.ts"
import { Upgrades } from "../Edge/Upgrades.ts"
import { traceIdFrom } from "../Edge/RequestIds.ts"
import { wsConnectionsActive, wsMessagesReceived } from "../Observability/Metrics.ts"
import { RateLimiter } from "../RateLimit/RateLimiter.ts"
import { type Connection, makeConnection } from "./Connection.ts"
import { makeDispatch } from "./Dispatch.ts"
import { makeFanOut } from "./FanOut.ts"
import { PackageHandlers } from "./Packages.ts"
import { formatOf, makeHandshake } from "./Handshake.ts"
import { ConnectionRegistry } from "./Registry.ts"
import { CLOSE_GRACE_MS, makeSockets } from "./Sockets.ts"
import { headerText, makeUpgradeGate } from "./UpgradeGate.ts"

export const layer = Layer.effectDiscard(Effect.gen(function*() {
  const upgrades = yield* Upgrades
  const config = yield* AppConfig
  const verifier = yield* TokenVerifier
  const limiter = yield* RateLimiter
  const audit = yield* AuditLog
  const registry = yield* ConnectionRegistry
  const fibers = yield* FiberSet.make()
  const packages = yield* PackageHandlers
  const run = yield* FiberSet.runtime(fibers)<never>()

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: config.wsMaxMessageBytes, // larger frames: ws closes 1009
    perMessageDeflate: false,
    clientTracking: false,
    // Pongs are sent by the connection, within its send bound (Connection.ts `answerPing`).
    autoPong: false
  })
  const sockets = makeSockets()
  const correlationIds = new WeakMap<IncomingMessage, string>()

  // The 101 response carries the connection's correlation id, like every HTTP response.
  wss.on("headers", (headers, request) => {
    const id = correlationIds.get(request)
    if (id !== undefined) headers.push(`X-Correlation-ID: ${id}`)
  })

  const fork = (conn: Connection, effect: Effect.Effect<void>) => {
    const user = conn.user()
    run(Effect.annotateLogs(effect, {
      correlation_id: conn.correlationId,
      trace_id: conn.traceId,
      connection_id: conn.id,
      ...(user !== undefined ? { user_id: user.id } : {})
    }))
  }

  const handshake = makeHandshake({
    config,
    verifier,
    registry,
    audit,
    fork,
    opened: (conn) => {
      sockets.opened(conn)
      pump(conn) // frames that arrived during the handshake
    }
  })
  const dispatch = makeDispatch({ config, limiter, audit, packages, reauthenticate: handshake.reauthenticate })

  /** Handles the inbox in order, one frame at a time, on one fiber while there is work. */
  const pump = (conn: Connection) => {
    if (!conn.inbox.claim()) return
    fork(
      conn,
      Effect.gen(function*() {
        while (conn.isOpen()) {
          const next = conn.inbox.shift()
          if (next === undefined) break
          yield* dispatch.handle(conn, next)
        }
      }).pipe(
        Effect.catchCause((cause) => Effect.logError("WebSocket message failed", cause)),
        Effect.ensuring(Effect.sync(() => {
          conn.inbox.release()
          pump(conn)
        }))
      )
    )
  }

  const onDropped = (conn: Connection) =>
    fork(conn, Effect.logWarning("WebSocket client dropped: it does not read what it is sent"))

  const onEnded = (conn: Connection, code: number) => {
    conn.ended()
    if (conn.wasOpen()) {
      wsConnectionsActive.dec()
      fork(conn, Effect.logInfo("WebSocket closed").pipe(Effect.annotateLogs({ code })))
    }
    fork(conn, handshake.end(conn))
    sockets.ended(conn)
  }

  const accept = (ws: WebSocket, request: IncomingMessage, url: URL, correlationId: string, ip: string) => {
    const format = formatOf(url)
    const id = randomUUID()
    const conn = makeConnection(ws, {
      id,
      format: format === "protobuf" ? "protobuf" : "json",
      correlationId,
      traceId: traceIdFrom(headerText(request.headers["traceparent"]), id),
      ip,
      userAgent: request.headers["user-agent"] ?? ""
    }, onDropped)
    sockets.add(conn)
    ws.on("message", (data, isBinary) => {
      wsMessagesReceived.inc()
      if (conn.isClosed()) return
      const frame = { data, isBinary }
      if (handshake.offer(conn, frame)) return
      conn.inbox.push(frame)
      pump(conn)
    })
    ws.on("close", (code) => onEnded(conn, code))
    ws.on("error", () => {}) // protocol errors (bad UTF-8 → 1007, too big → 1009): ws closes by itself
    ws.on("pong", conn.pong)
    ws.on("ping", conn.answerPing)
    handshake.begin(conn, request, url, format)
  }

  const complete = (request: IncomingMessage, socket: Duplex, head: Buffer, url: URL, correlationId: string, ip: string) => {
    correlationIds.set(request, correlationId)
    wss.handleUpgrade(request, socket, head, (ws) => accept(ws, request, url, correlationId, ip))
  }

  const upgrade = makeUpgradeGate({
    config,
    limiter,
    held: sockets.size,
    shuttingDown: sockets.isShuttingDown,
    run: (effect) => void run(effect),
    complete
  })

  yield* registry.listen(makeFanOut(sockets))
  yield* Effect.forkScoped(sockets.heartbeat)
  // Runs before the fiber set is interrupted: connections end and their slots are released first.
  yield* Effect.addFinalizer(() =>
    Effect.promise(sockets.shutdown).pipe(
      Effect.andThen(FiberSet.awaitEmpty(fibers)),
      Effect.timeoutOption(CLOSE_GRACE_MS * 2),
      Effect.andThen(Effect.sync(() => wss.close()))
    )
  )
  yield* upgrades.handle({ upgrade, shutdown: sockets.shutdown })
}))
