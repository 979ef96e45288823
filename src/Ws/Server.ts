/**
 * The `/web` WebSocket endpoint (docs/websocket.md) on the HTTP port: the
 * wiring of its parts. An upgrade becomes a `Connection` (Connection.ts: its state, its bounded
 * outbound queue with one writer, its inbox), is admitted by the `Handshake` (Handshake.ts), and
 * its frames are handled one at a time, in order, by `Dispatch` (Dispatch.ts: rate → schema →
 * permission → handler). Broadcasts and session expiries come from the registry, from every
 * instance; heartbeats drop dead peers; shutdown closes every connection 1001.
 *
 * Before an upgrade completes, two cheap checks keep a flood of upgrades from costing
 * a socket and a signature check each: the instance holds at most WS_MAX_CONNECTIONS sockets
 * (handshakes included; more get 503), and upgrades are rate limited per client IP like
 * unauthenticated HTTP requests (RATE_LIMIT_PER_MINUTE + RATE_LIMIT_BURST per trailing 60 s, in
 * a bucket of their own; 429 with Retry-After) when RATE_LIMIT_ENABLED. Both are counted in
 * `ws_upgrades_refused_total{reason}`.
 *
 * Transport is `ws` directly (not the platform's Socket) for its frame-size limit (1009), its
 * send buffer figure and one fiber per message instead of per connection.
 */
import { Effect, FiberSet, Layer, Option, Schedule } from "effect"
import { randomUUID } from "node:crypto"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { type WebSocket, WebSocketServer } from "ws"
import { AuditLog } from "../AuditLogs/AuditLog.ts"
import { hasRoles } from "../Auth/Rbac.ts"
import { TokenVerifier } from "../Auth/TokenVerifier.ts"
import type { Authors } from "../Authors/Authors.ts"
import { ReadCache } from "../Authors/ReadCache.ts"
import { AppConfig } from "../Config.ts"
import { MethodNotAllowed, WsStatus } from "../Errors.ts"
import { OperationRoles } from "../Domain/User.ts"
import { clientIp } from "../Edge/ClientIp.ts"
import { refuseOnSocket, Upgrades } from "../Edge/Upgrades.ts"
import { correlationIdFrom, traceIdFrom } from "../Edge/RequestIds.ts"
import { wsConnectionsActive, wsMessagesReceived, wsUpgradesRefusedTotal } from "../Observability/Metrics.ts"
import { RATE_WINDOW_MS, RateLimiter, rateLimitHeaders, withFailMode } from "../RateLimit/RateLimiter.ts"
import { type Connection, makeConnection } from "./Connection.ts"
import { encodeReply, makeDispatch } from "./Dispatch.ts"
import { formatOf, makeHandshake } from "./Handshake.ts"
import { BROADCAST_REQ_ID, Close, WS_PATH } from "./Protocol.ts"
import { type BroadcastMessage, ConnectionRegistry } from "./Registry.ts"

/** Dead peers (no pong to a ping) are dropped after at most two of these. */
const HEARTBEAT = "30 seconds"
/** At shutdown, clients get this long to answer the 1001 close before their sockets are cut. */
const CLOSE_GRACE_MS = 2_000

const headerText = (value: string | ReadonlyArray<string> | undefined) =>
  typeof value === "string" || value === undefined ? value : value.join(",")

export const WsServerLive = Layer.effectDiscard(Effect.gen(function*() {
  const upgrades = yield* Upgrades
  const config = yield* AppConfig
  const verifier = yield* TokenVerifier
  const limiter = yield* RateLimiter
  const audit = yield* AuditLog
  const registry = yield* ConnectionRegistry
  const fibers = yield* FiberSet.make()
  const cache = yield* ReadCache
  // Package handlers need `Authors` and `ReadCache`: the fibers run with the layer's context.
  const run = yield* FiberSet.runtime(fibers)<Authors | ReadCache>()

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: config.wsMaxMessageBytes, // larger frames: ws closes 1009
    perMessageDeflate: false,
    clientTracking: false,
    // Pongs are sent by the connection, within its send bound (Connection.ts `answerPing`).
    autoPong: false
  })
  /** Every socket, from upgrade to end; `open` holds the authenticated ones by id. */
  const sockets = new Set<Connection>()
  const open = new Map<string, Connection>()
  const correlationIds = new WeakMap<IncomingMessage, string>()
  let shuttingDown: Promise<void> | undefined
  let allEnded: (() => void) | undefined

  // The 101 response carries the connection's correlation id, like every HTTP response.
  wss.on("headers", (headers, request) => {
    const id = correlationIds.get(request)
    if (id !== undefined) headers.push(`X-Correlation-ID: ${id}`)
  })

  const fork = (conn: Connection, effect: Effect.Effect<void, never, Authors | ReadCache>) => {
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
      open.set(conn.id, conn)
      pump(conn) // frames that arrived during the handshake
    }
  })
  const dispatch = makeDispatch({ config, limiter, cache, audit, reauthenticate: handshake.reauthenticate })

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

  /** Encoded once per format, sent to every open connection allowed to read authors. */
  const onBroadcast = (message: BroadcastMessage) => {
    const frame = { status: WsStatus.OK, data: message, meta: null }
    let json: string | Uint8Array | undefined
    let protobuf: string | Uint8Array | undefined
    for (const conn of open.values()) {
      const user = conn.user()
      if (!conn.isOpen() || user === undefined || !hasRoles(user, OperationRoles.listAuthors)) continue
      if (conn.format === "json") conn.send(json ??= encodeReply("json", 0, BROADCAST_REQ_ID, frame))
      else conn.send(protobuf ??= encodeReply("protobuf", 0, BROADCAST_REQ_ID, frame))
    }
  }

  const onSessionExpired = (connectionId: string) => open.get(connectionId)?.close(Close.SessionExpired)

  const onDropped = (conn: Connection) =>
    fork(conn, Effect.logWarning("WebSocket client dropped: it does not read what it is sent"))

  const onEnded = (conn: Connection, code: number) => {
    conn.ended()
    sockets.delete(conn)
    open.delete(conn.id)
    if (conn.wasOpen()) {
      wsConnectionsActive.dec()
      fork(conn, Effect.logInfo("WebSocket closed").pipe(Effect.annotateLogs({ code })))
    }
    fork(conn, handshake.end(conn))
    if (allEnded !== undefined && sockets.size === 0) allEnded()
  }

  const ipOf = (request: IncomingMessage) =>
    clientIp(request.socket.remoteAddress, headerText(request.headers["x-forwarded-for"]), config.trustedProxies)

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

  /** Upgrades past the checks whose WebSocket does not exist yet (they count toward the cap). */
  let admitting = 0
  const upgradeLimit = config.rateLimitPerMinute + config.rateLimitBurst
  const upgradeRate = withFailMode(config.rateLimitFailMode, "websocket_upgrade", upgradeLimit)

  const complete = (request: IncomingMessage, socket: Duplex, head: Buffer, url: URL, correlationId: string, ip: string) => {
    correlationIds.set(request, correlationId)
    wss.handleUpgrade(request, socket, head, (ws) => accept(ws, request, url, correlationId, ip))
  }

  const upgrade = (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(request.url ?? "/", "http://localhost")
    // docs/http-api.md#conventions: every answer carries the caller's correlation id (when valid), refusals included.
    const correlationId = correlationIdFrom(headerText(request.headers["x-correlation-id"]))
    if (url.pathname !== WS_PATH) return refuseOnSocket(socket, 404, "Not Found", { correlationId })
    // As the HTTP route answers a wrong method (Http/ErrorResponse.ts), not ws's text/html 405.
    if (request.method !== "GET") {
      return refuseOnSocket(socket, 405, MethodNotAllowed.DETAIL, { correlationId, headers: { Allow: "GET, HEAD" } })
    }
    if (shuttingDown !== undefined) return refuseOnSocket(socket, 503, "Service unavailable", { correlationId })
    if (sockets.size + admitting >= config.wsMaxConnections) {
      wsUpgradesRefusedTotal.inc({ reason: "capacity" })
      return refuseOnSocket(socket, 503, "Too many connections", { correlationId, headers: { "Retry-After": "5" } })
    }
    const ip = ipOf(request)
    if (!config.rateLimitEnabled) return complete(request, socket, head, url, correlationId, ip)
    admitting++
    run(
      upgradeRate(limiter.hit(`ws:upgrade:ip:${ip}`, upgradeLimit, RATE_WINDOW_MS)).pipe(
        Effect.map((decision) => {
          if (Option.isSome(decision) && !decision.value.allowed) {
            wsUpgradesRefusedTotal.inc({ reason: "rate_limit" })
            return refuseOnSocket(socket, 429, "Rate limit exceeded", { correlationId, headers: rateLimitHeaders(decision.value) })
          }
          if (shuttingDown !== undefined) return refuseOnSocket(socket, 503, "Service unavailable", { correlationId })
          complete(request, socket, head, url, correlationId, ip)
        }),
        Effect.ensuring(Effect.sync(() => admitting--)),
        Effect.catchCause((cause) => Effect.andThen(Effect.logError("WebSocket upgrade failed", cause), Effect.sync(() => socket.destroy())))
      )
    )
  }

  /** docs/operations.md#shutdown: every connection closes 1001; sockets that do not answer are cut. */
  const shutdown = () =>
    shuttingDown ??= new Promise<void>((resolve) => {
      if (sockets.size === 0) return resolve()
      allEnded = resolve
      for (const conn of sockets) conn.close(Close.ShuttingDown)
      setTimeout(() => {
        for (const conn of sockets) conn.terminate()
      }, CLOSE_GRACE_MS).unref()
    })

  yield* registry.listen({ onBroadcast, onSessionExpired })
  yield* Effect.forkScoped(Effect.repeat(
    Effect.sync(() => {
      for (const conn of sockets) if (!conn.ping()) conn.terminate()
    }),
    Schedule.spaced(HEARTBEAT)
  ))
  // Runs before the fiber set is interrupted: connections end and their slots are released first.
  yield* Effect.addFinalizer(() =>
    Effect.promise(shutdown).pipe(
      Effect.andThen(FiberSet.awaitEmpty(fibers)),
      Effect.timeoutOption(CLOSE_GRACE_MS * 2),
      Effect.andThen(Effect.sync(() => wss.close()))
    )
  )
  yield* upgrades.handle({ upgrade, shutdown })
}))
