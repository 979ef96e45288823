/**
 * The `/web` WebSocket endpoint (INTERFACE §WebSocket endpoint, CONTRACT §5) on the HTTP port.
 *
 * Handshake: the upgrade always completes; then origin (1008) → token from the query, the
 * `Authorization` header or a first `{"type":"auth"}` frame (4001 / 4002) → the user's
 * connection slot in the registry (1008) → open. Each rejection releases what it counted.
 *
 * Messages of one connection are handled one at a time, in order: decode the frame (unusable →
 * 1003) → rate check → envelope and data schema → permission → handler (Packages.ts) → reply.
 * Frames that arrive faster than they are handled wait in a small inbox; past its high-water
 * mark the socket stops being read (TCP backpressure) until the inbox drains.
 *
 * Sending never waits: a frame goes to the socket's buffer, and a client whose buffer holds more
 * than `SEND_BUFFER_MAX` (it does not read) is dropped, so one slow client never holds back a
 * broadcast to the others. Broadcasts and session expiries come from the registry, from every
 * instance. Transport is `ws` directly (not the platform's Socket) for its frame-size limit
 * (1009), its send buffer figure and one fiber per message instead of per connection.
 */
import { Effect, FiberSet, Layer, Option, Schedule } from "effect"
import { randomUUID } from "node:crypto"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { type RawData, WebSocket, WebSocketServer } from "ws"
import { AuditLog, type AuditOutcome } from "../AuditLogs/AuditLog.ts"
import { captureRequestData } from "../AuditLogs/RequestData.ts"
import { authenticateHeader } from "../Auth/Authentication.ts"
import { hasRoles, OperationRoles } from "../Auth/Rbac.ts"
import { TokenVerifier } from "../Auth/TokenVerifier.ts"
import type { Authors } from "../Authors/Authors.ts"
import { AppConfig } from "../Config.ts"
import type { Principal } from "../Domain/User.ts"
import { WsStatus } from "../Errors.ts"
import { clientIp } from "../Http/ClientIp.ts"
import { NodeServer, refuseUpgrade } from "../Http/NodeServer.ts"
import { correlationIdFrom } from "../Http/RequestContext.ts"
import {
  rateLimitHitsTotal,
  rateLimitStoreErrorsTotal,
  wsConnectionsActive,
  wsConnectionsTotal,
  wsMessageProcessingDuration,
  wsMessagesReceived,
  wsMessagesSent
} from "../Observability/Metrics.ts"
import { RateLimiter, withFailMode } from "../RateLimit/RateLimiter.ts"
import { type PackageReply, Packages, reply } from "./Packages.ts"
import { encodeResponse, parseProtobufFrame } from "./Protobuf.ts"
import {
  AUTH_OK_TEXT,
  BROADCAST_REQ_ID,
  checkEnvelope,
  Close,
  type CloseCode,
  type Frame,
  parseJsonFrame
} from "./Protocol.ts"
import { type BroadcastMessage, ConnectionRegistry } from "./Registry.ts"

export const WS_PATH = "/web"

/** Bytes a connection may have waiting to be sent before it counts as not reading. */
export const SEND_BUFFER_MAX = 4 * 1024 * 1024
/** Frames waiting to be handled before the socket stops being read, and when it reads again. */
const INBOX_HIGH = 64
const INBOX_LOW = 16
/** Dead peers (no pong to a ping) are dropped after at most two of these. */
const HEARTBEAT = "30 seconds"
/** At shutdown, clients get this long to answer the 1001 close before their sockets are cut. */
const CLOSE_GRACE_MS = 2_000
const MESSAGE_WINDOW_MS = 60_000

type Format = "json" | "protobuf"

interface Connection {
  readonly id: string
  readonly ws: WebSocket
  readonly format: Format
  readonly correlationId: string
  readonly ip: string
  readonly userAgent: string
  /** authenticating → open → closed; `closed` as soon as either side starts closing. */
  state: "authenticating" | "open" | "closed"
  /** Waiting for the first-frame auth exchange (no token in the query). */
  awaitingAuthFrame: boolean
  authTimer: ReturnType<typeof setTimeout> | undefined
  user: Principal | undefined
  /** Holds a slot in the registry (released when the socket ends). */
  admitted: boolean
  wasOpen: boolean
  readonly inbox: Array<{ readonly data: RawData; readonly isBinary: boolean }>
  busy: boolean
  /** When messages were refused for rate, in the trailing window (flood detection). */
  readonly refused: Array<number>
  alive: boolean
}

const headerText = (value: string | ReadonlyArray<string> | undefined) =>
  typeof value === "string" || value === undefined ? value : value.join(",")

const bearer = (token: string) => (/^bearer\s/i.test(token) ? token : `Bearer ${token}`)

/** CONTRACT §5: `Authorization` (URL-encoded `Bearer <jwt>`), `token` or `access_token` in the query. */
const queryToken = (url: URL): string | undefined => {
  for (const name of ["Authorization", "authorization", "token", "access_token"]) {
    const value = url.searchParams.get(name)
    if (value !== null && value.trim() !== "") return value.trim()
  }
  return undefined
}

/** INTERFACE §Authentication 7. */
export const originAllowed = (allowed: ReadonlyArray<string>, origin: string | undefined) =>
  allowed.includes("*") || origin === undefined || allowed.includes(origin)

const toBytes = (data: RawData): Buffer =>
  Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data)

const decodeFrame = (format: Format, data: RawData, isBinary: boolean): Frame => {
  if (isBinary) return format === "protobuf" ? parseProtobufFrame(toBytes(data)) : { _tag: "Invalid" }
  const frame = parseJsonFrame(toBytes(data).toString("utf8"))
  // In protobuf format only auth frames may be text (CONTRACT §9).
  return format === "protobuf" && frame._tag !== "Auth" ? { _tag: "Invalid" } : frame
}

/** Read through a function: the state changes while a handshake waits, which narrowing cannot see. */
const isClosed = (conn: Connection) => conn.state === "closed"

const outcomeOf = (status: WsStatus): AuditOutcome =>
  status === WsStatus.OK ? "success" : status === WsStatus.PERMISSION_DENIED ? "permission_denied" : "error"

export const WsServerLive = Layer.scopedDiscard(Effect.gen(function*() {
  const node = yield* NodeServer
  const config = yield* AppConfig
  const verifier = yield* TokenVerifier
  const limiter = yield* RateLimiter
  const audit = yield* AuditLog
  const registry = yield* ConnectionRegistry
  const fibers = yield* FiberSet.make()
  // Package handlers need `Authors`: the fibers run with the layer's context.
  const run = yield* FiberSet.runtime(fibers)<Authors>()

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: config.wsMaxMessageBytes, // larger frames: ws closes 1009
    perMessageDeflate: false,
    clientTracking: false
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

  const logIds = (conn: Connection) =>
    Effect.annotateLogs({
      correlation_id: conn.correlationId,
      connection_id: conn.id,
      ...(conn.user !== undefined ? { user_id: conn.user.id } : {})
    })

  const fork = (conn: Connection, effect: Effect.Effect<void, never, Authors>) => run(logIds(conn)(effect))

  // -------------------------------------------------------------------------------------------
  // Sending and closing

  const drop = (conn: Connection) => {
    conn.state = "closed"
    conn.ws.terminate()
    fork(conn, Effect.logWarning("WebSocket client dropped: it does not read what it is sent"))
  }

  const send = (conn: Connection, payload: string | Uint8Array) => {
    const ws = conn.ws
    if (ws.readyState !== WebSocket.OPEN) return
    if (ws.bufferedAmount > SEND_BUFFER_MAX) return drop(conn)
    ws.send(payload)
    wsMessagesSent.inc()
  }

  const close = (conn: Connection, code: CloseCode) => {
    if (conn.state === "closed") return
    conn.state = "closed"
    if (conn.authTimer !== undefined) clearTimeout(conn.authTimer)
    conn.ws.close(code.code, code.reason)
  }

  const encode = (conn: Connection, pkgId: number, reqId: string, r: Pick<PackageReply, "status" | "data" | "meta">) =>
    conn.format === "json"
      ? JSON.stringify({ pkg_id: pkgId, req_id: reqId, status_code: r.status, data: r.data, meta: r.meta })
      : encodeResponse({ pkg_id: pkgId, req_id: reqId, status_code: r.status, data: r.data, meta: r.meta })

  /** Encoded once per format, sent to every open connection allowed to read authors. */
  const onBroadcast = (message: BroadcastMessage) => {
    const frame = { status: WsStatus.OK, data: message, meta: null }
    let json: string | Uint8Array | undefined
    let protobuf: string | Uint8Array | undefined
    for (const conn of open.values()) {
      if (conn.state !== "open" || conn.user === undefined || !hasRoles(conn.user, OperationRoles.listAuthors)) continue
      if (conn.format === "json") send(conn, json ??= encode(conn, 0, BROADCAST_REQ_ID, frame))
      else send(conn, protobuf ??= encode(conn, 0, BROADCAST_REQ_ID, frame))
    }
  }

  const onSessionExpired = (connectionId: string) => {
    const conn = open.get(connectionId)
    if (conn !== undefined) close(conn, Close.SessionExpired)
  }

  // -------------------------------------------------------------------------------------------
  // Audit

  const recordConnection = (
    conn: Connection,
    user: Principal,
    outcome: AuditOutcome,
    responseStatus: number,
    errorMessage: string
  ) =>
    audit.record({
      timestamp: new Date(),
      user_id: user.id,
      username: user.username,
      user_roles: user.roles,
      action_type: "WS:CONNECT",
      resource: `ws:${WS_PATH}`,
      outcome,
      ip_address: conn.ip,
      user_agent: conn.userAgent,
      request_id: randomUUID(),
      correlation_id: conn.correlationId,
      response_status: responseStatus,
      duration_ms: 0,
      request_data: { query: { format: conn.format } },
      error_message: errorMessage
    })

  // -------------------------------------------------------------------------------------------
  // Handshake

  const sessionEnd = (user: Principal) => (user.expiresAt + config.wsSessionGraceSeconds) * 1000

  /** Token check, then the user's slot; opens the connection or closes it with the CONTRACT code. */
  const authenticate = (conn: Connection, token: string, viaFrame: boolean) =>
    Effect.gen(function*() {
      const verified = yield* Effect.either(authenticateHeader(verifier, bearer(token)))
      if (conn.state === "closed") return
      if (verified._tag === "Left") {
        wsConnectionsTotal.inc({ status: "rejected_auth" })
        return close(conn, Close.InvalidToken)
      }
      const user = verified.right
      const slot = yield* Effect.either(registry.acquire(user.id, conn.id, config.wsMaxConnectionsPerUser))
      let admitted: boolean
      if (slot._tag === "Right") {
        admitted = slot.right
      } else {
        rateLimitStoreErrorsTotal.inc({ limit_type: "websocket_connection" })
        yield* Effect.logWarning(`Connection registry unavailable; failing ${config.rateLimitFailMode}`, slot.left.cause)
        if (config.rateLimitFailMode === "closed") {
          yield* registry.release(user.id, conn.id)
          return close(conn, Close.TryAgainLater)
        }
        admitted = true
      }
      if (!admitted) {
        wsConnectionsTotal.inc({ status: "rejected_limit" })
        rateLimitHitsTotal.inc({ limit_type: "websocket_connection" })
        yield* recordConnection(conn, user, "error", 429, Close.TooManyConnections.reason)
        return close(conn, Close.TooManyConnections)
      }
      conn.admitted = true
      conn.user = user
      if (isClosed(conn)) return yield* release(conn) // the client left meanwhile
      yield* registry.startSession(conn.id, sessionEnd(user))
      conn.state = "open"
      conn.wasOpen = true
      open.set(conn.id, conn)
      wsConnectionsTotal.inc({ status: "accepted" })
      wsConnectionsActive.inc()
      yield* Effect.logInfo("WebSocket connected").pipe(Effect.annotateLogs({ user_id: user.id, format: conn.format }))
      if (viaFrame) send(conn, AUTH_OK_TEXT)
      pump(conn) // frames that arrived during the handshake
    })

  /** Origin not permitted: 1008; the user, when a query token names one, gets an audit record. */
  const rejectOrigin = (conn: Connection, token: string | undefined) =>
    Effect.gen(function*() {
      wsConnectionsTotal.inc({ status: "rejected_auth" })
      close(conn, Close.OriginNotAllowed)
      if (token === undefined) return
      const user = yield* Effect.option(authenticateHeader(verifier, bearer(token)))
      if (user._tag === "Some") yield* recordConnection(conn, user.value, "permission_denied", 403, Close.OriginNotAllowed.reason)
    })

  /** `{"type":"auth"}` on an open connection: the same user's new token extends the session. */
  const reauthenticate = (conn: Connection, token: unknown) =>
    Effect.gen(function*() {
      const verified = typeof token === "string"
        ? yield* Effect.either(authenticateHeader(verifier, bearer(token)))
        : undefined
      if (verified === undefined || verified._tag === "Left") return close(conn, Close.InvalidToken)
      if (verified.right.id !== conn.user?.id) return close(conn, Close.SubjectMismatch)
      conn.user = verified.right
      yield* registry.startSession(conn.id, sessionEnd(verified.right))
      send(conn, AUTH_OK_TEXT)
    })

  const release = (conn: Connection) =>
    Effect.gen(function*() {
      if (!conn.admitted || conn.user === undefined) return
      conn.admitted = false
      yield* registry.endSession(conn.id)
      yield* registry.release(conn.user.id, conn.id)
    })

  // -------------------------------------------------------------------------------------------
  // Messages

  /** Rate check (CONTRACT §5): undefined when admitted, else the seconds to wait. */
  const messageRate = (user: Principal) =>
    limiter.hit(`ws:msg:user:${user.id}`, config.wsMessageRateLimit, MESSAGE_WINDOW_MS).pipe(
      withFailMode(config.rateLimitFailMode, "websocket_message", config.wsMessageRateLimit),
      Effect.map((d) => (Option.isSome(d) && !d.value.allowed ? d.value.retryAfterSeconds : undefined))
    )

  /** CONTRACT §9: a client refused `WS_MESSAGE_RATE_LIMIT` times in the trailing 60 s is flooding. */
  const flooding = (conn: Connection) => {
    const now = Date.now()
    conn.refused.push(now)
    while (conn.refused.length > 0 && conn.refused[0]! <= now - MESSAGE_WINDOW_MS) conn.refused.shift()
    return conn.refused.length >= config.wsMessageRateLimit
  }

  const handleRequest = (conn: Connection, user: Principal, frame: Extract<Frame, { _tag: "Request" }>) =>
    Effect.gen(function*() {
      const startedAt = new Date()
      const started = performance.now()
      const pkg = Packages.get(frame.pkgId)
      let result: PackageReply
      const retryAfter = yield* messageRate(user)
      if (retryAfter !== undefined) {
        if (flooding(conn)) return close(conn, Close.MessageRateLimit)
        rateLimitHitsTotal.inc({ limit_type: "websocket_message" })
        result = reply(WsStatus.ERROR, { msg: "Rate limit exceeded", retry_after: retryAfter }, 429)
      } else {
        result = yield* Effect.suspend(() => {
          const envelope = checkEnvelope(frame.fields)
          return envelope._tag === "Left"
            ? Effect.succeed(reply(WsStatus.INVALID_DATA, { msg: "Invalid request data", errors: envelope.left }))
            : pkg === undefined
            ? Effect.succeed(reply(WsStatus.INVALID_DATA, { msg: `Unknown pkg_id ${frame.pkgId}` }))
            : pkg.process(envelope.right.data, user)
        }).pipe(
          // A bug is answered like HTTP's 500, never left without a reply.
          Effect.catchAllDefect((defect) => Effect.as(Effect.logError("WebSocket message failed", defect), INTERNAL_ERROR))
        )
      }
      const seconds = (performance.now() - started) / 1000
      wsMessageProcessingDuration.observe({ pkg_id: pkg === undefined ? "unknown" : String(pkg.pkgId) }, seconds)
      const data = frame.fields["data"]
      yield* audit.record({
        timestamp: startedAt,
        user_id: user.id,
        username: user.username,
        user_roles: user.roles,
        action_type: `WS:${pkg?.name ?? "UNKNOWN"}`,
        resource: `ws:${WS_PATH}`,
        outcome: outcomeOf(result.status),
        ip_address: conn.ip,
        user_agent: conn.userAgent,
        request_id: frame.reqId,
        correlation_id: conn.correlationId,
        response_status: result.httpStatus,
        duration_ms: Math.round(seconds * 1000),
        request_data: captureRequestData(undefined, typeof data === "object" ? data : undefined),
        error_message: result.status === WsStatus.OK ? null : messageOf(result.data)
      })
      send(conn, encode(conn, frame.pkgId, frame.reqId, result))
    }).pipe(
      Effect.withSpan("ws.message", {
        kind: "server",
        captureStackTrace: false,
        attributes: { pkg_id: frame.pkgId, "ws.req_id": frame.reqId, "user.id": user.id }
      }),
      Effect.annotateLogs({ request_id: frame.reqId })
    )

  const handleFrame = (conn: Connection, data: RawData, isBinary: boolean) => {
    const frame = decodeFrame(conn.format, data, isBinary)
    const user = conn.user
    if (frame._tag === "Invalid" || user === undefined) return Effect.sync(() => close(conn, Close.InvalidFormat))
    if (frame._tag === "Auth") return reauthenticate(conn, frame.token)
    return handleRequest(conn, user, frame)
  }

  /** Handles the inbox in order, one frame at a time, on one fiber while there is work. */
  const pump = (conn: Connection) => {
    if (conn.busy || conn.inbox.length === 0 || conn.state !== "open") return
    conn.busy = true
    fork(
      conn,
      Effect.gen(function*() {
        while (conn.state === "open") {
          const next = conn.inbox.shift()
          if (next === undefined) break
          if (conn.ws.isPaused && conn.inbox.length <= INBOX_LOW) conn.ws.resume()
          yield* handleFrame(conn, next.data, next.isBinary)
        }
      }).pipe(
        Effect.catchAllCause((cause) => Effect.logError("WebSocket message failed", cause)),
        Effect.ensuring(Effect.sync(() => {
          conn.busy = false
          pump(conn)
        }))
      )
    )
  }

  const onFrame = (conn: Connection, data: RawData, isBinary: boolean) => {
    wsMessagesReceived.inc()
    if (conn.state === "closed") return
    if (conn.awaitingAuthFrame) {
      conn.awaitingAuthFrame = false
      clearTimeout(conn.authTimer)
      const frame = isBinary ? undefined : parseJsonFrame(toBytes(data).toString("utf8"))
      if (frame?._tag !== "Auth" || typeof frame.token !== "string") return close(conn, Close.AuthenticationRequired)
      fork(conn, authenticate(conn, frame.token, true))
      return
    }
    conn.inbox.push({ data, isBinary })
    if (conn.inbox.length >= INBOX_HIGH && !conn.ws.isPaused) conn.ws.pause()
    pump(conn)
  }

  const onEnded = (conn: Connection, code: number) => {
    conn.state = "closed"
    conn.inbox.length = 0
    if (conn.authTimer !== undefined) clearTimeout(conn.authTimer)
    sockets.delete(conn)
    open.delete(conn.id)
    if (conn.wasOpen) {
      wsConnectionsActive.dec()
      fork(conn, Effect.logInfo("WebSocket closed").pipe(Effect.annotateLogs({ code })))
    }
    fork(conn, release(conn))
    if (allEnded !== undefined && sockets.size === 0) allEnded()
  }

  const accept = (ws: WebSocket, request: IncomingMessage, url: URL, correlationId: string) => {
    const format = url.searchParams.get("format") ?? "json"
    const conn: Connection = {
      id: randomUUID(),
      ws,
      format: format === "protobuf" ? "protobuf" : "json",
      correlationId,
      ip: clientIp(request.socket.remoteAddress, headerText(request.headers["x-forwarded-for"]), config.trustedProxies),
      userAgent: request.headers["user-agent"] ?? "",
      state: "authenticating",
      awaitingAuthFrame: false,
      authTimer: undefined,
      user: undefined,
      admitted: false,
      wasOpen: false,
      inbox: [],
      busy: false,
      refused: [],
      alive: true
    }
    sockets.add(conn)
    ws.on("message", (data, isBinary) => onFrame(conn, data, isBinary))
    ws.on("close", (code) => onEnded(conn, code))
    ws.on("error", () => {}) // protocol errors (bad UTF-8 → 1007, too big → 1009): ws closes by itself
    ws.on("pong", () => {
      conn.alive = true
    })
    if (format !== "json" && format !== "protobuf") return close(conn, Close.UnsupportedFormat)
    const token = queryToken(url) ?? request.headers.authorization
    if (!originAllowed(config.allowedWsOrigins, request.headers.origin)) return void fork(conn, rejectOrigin(conn, token))
    if (token !== undefined) return void fork(conn, authenticate(conn, token, false))
    conn.awaitingAuthFrame = true
    conn.authTimer = setTimeout(() => close(conn, Close.AuthTimeout), config.wsAuthTimeoutSeconds * 1000)
  }

  const upgrade = (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(request.url ?? "/", "http://localhost")
    if (url.pathname !== WS_PATH) return refuseUpgrade(socket, 404, "Not Found")
    if (shuttingDown !== undefined) return refuseUpgrade(socket, 503, "Service unavailable")
    const correlationId = correlationIdFrom(headerText(request.headers["x-correlation-id"]))
    correlationIds.set(request, correlationId)
    wss.handleUpgrade(request, socket, head, (ws) => accept(ws, request, url, correlationId))
  }

  /** CONTRACT §5 Shutdown: every connection closes 1001; sockets that do not answer are cut. */
  const shutdown = () =>
    shuttingDown ??= new Promise<void>((resolve) => {
      if (sockets.size === 0) return resolve()
      allEnded = resolve
      for (const conn of sockets) close(conn, Close.ShuttingDown)
      setTimeout(() => {
        for (const conn of sockets) conn.ws.terminate()
      }, CLOSE_GRACE_MS).unref()
    })

  yield* registry.listen({ onBroadcast, onSessionExpired })
  yield* Effect.forkScoped(Effect.repeat(
    Effect.sync(() => {
      for (const conn of sockets) {
        if (!conn.alive) {
          conn.ws.terminate()
          continue
        }
        conn.alive = false
        conn.ws.ping()
      }
    }),
    Schedule.spaced(HEARTBEAT)
  ))
  // Runs before the fiber set is interrupted: connections end and their slots are released first.
  yield* Effect.addFinalizer(() =>
    Effect.promise(shutdown).pipe(
      Effect.zipRight(FiberSet.awaitEmpty(fibers)),
      Effect.timeoutOption(CLOSE_GRACE_MS * 2),
      Effect.zipRight(Effect.sync(() => wss.close()))
    )
  )
  yield* node.handleUpgrades({ upgrade, shutdown })
}))

const INTERNAL_ERROR = reply(WsStatus.ERROR, { msg: "Internal server error" })

const messageOf = (data: unknown): string | null =>
  typeof data === "object" && data !== null && "msg" in data && typeof data.msg === "string" ? data.msg : null
