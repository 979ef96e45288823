/**
 * Admission to `/web` (docs/websocket.md#connecting, docs/websocket.md#close-codes, docs/websocket.md#sessions).
 *
 * The upgrade always completes; then: format (1003) → origin (1008) → token from the query, the
 * `Authorization` header or a first `{"type":"auth"}` frame within WS_AUTH_TIMEOUT_SECONDS (4001 /
 * 4002) → the user's connection slot in the registry (1008; 1013 when the registry cannot decide
 * and RATE_LIMIT_FAIL_MODE=closed) → the session until the token's exp → open. Each rejection
 * releases what it counted. A later auth frame on an open connection re-authenticates it.
 */
import { Effect } from "effect"
import type { IncomingMessage } from "node:http"
import type { AuditLog } from "../AuditLogs/AuditLog.ts"
import { authenticateHeader } from "../Auth/Authentication.ts"
import type { TokenVerifier } from "../Auth/TokenVerifier.ts"
import type { AppConfigShape } from "../Config.ts"
import type { Principal } from "../Domain/User.ts"
import { connectionEntry } from "../AuditLogs/Entries.ts"
import { rateLimitHitsTotal, rateLimitStoreErrorsTotal, wsConnectionsActive, wsConnectionsTotal } from "../Observability/Metrics.ts"
import { Outages } from "../Observability/Outages.ts"
import { type Connection, frameText, type InboundFrame } from "./Connection.ts"
import { AUTH_OK_TEXT, Close, parseJsonFrame, WS_PATH } from "./Protocol.ts"
import type { ConnectionRegistry } from "./Registry.ts"

const bearer = (token: string) => (/^bearer\s/i.test(token) ? token : `Bearer ${token}`)

/** docs/websocket.md#connecting: `Authorization` (URL-encoded `Bearer <jwt>`), `token` or `access_token` in the query. */
const queryToken = (url: URL): string | undefined => {
  for (const name of ["Authorization", "authorization", "token", "access_token"]) {
    const value = url.searchParams.get(name)
    if (value !== null && value.trim() !== "") return value.trim()
  }
  return undefined
}

/** The Origin check of docs/websocket.md#connecting. */
const originAllowed = (allowed: ReadonlyArray<string>, origin: string | undefined) =>
  allowed.includes("*") || origin === undefined || allowed.includes(origin)

/** `?format=` of an upgrade request (`begin` takes it); anything but json and protobuf is refused (1003). */
export const formatOf = (url: URL) => url.searchParams.get("format") ?? "json"

export interface HandshakeDeps {
  readonly config: AppConfigShape
  readonly verifier: TokenVerifier["Service"]
  readonly registry: ConnectionRegistry["Service"]
  readonly audit: AuditLog["Service"]
  /** Runs an Effect of a connection in the server's fiber set. */
  readonly fork: (conn: Connection, effect: Effect.Effect<void>) => void
  /** The connection is open: it starts receiving broadcasts and handling frames. */
  readonly opened: (conn: Connection) => void
}

export interface Handshake {
  /** A new socket: either closes it, starts authenticating, or waits for the auth frame. */
  readonly begin: (conn: Connection, request: IncomingMessage, url: URL, format: string) => void
  /** A frame during the handshake: true when it was the awaited auth frame (consumed here). */
  readonly offer: (conn: Connection, frame: InboundFrame) => boolean
  /** `{"type":"auth"}` on an open connection: the same user's new token extends the session. */
  readonly reauthenticate: (conn: Connection, token: unknown) => Effect.Effect<void>
  /** The socket ended: a pending auth timer is cleared at once; the Effect releases its slot and session. */
  readonly end: (conn: Connection) => Effect.Effect<void>
}

export const makeHandshake = (deps: HandshakeDeps): Handshake => {
  const { audit, config, registry, verifier } = deps
  /** Connections waiting for their first-frame auth exchange, with the timer that ends the wait. */
  const awaiting = new Map<Connection, ReturnType<typeof setTimeout>>()

  const sessionEnd = (user: Principal) => (user.expiresAt + config.wsSessionGraceSeconds) * 1000

  /** An authenticated user's connection refused (docs/audit.md#what-is-recorded): 403 → permission_denied, 429 → error. */
  const recordRefusal = (conn: Connection, user: Principal, status: number, reason: string) =>
    audit.record(connectionEntry(conn, user, {
      action_type: "WS:CONNECT",
      resource: `ws:${WS_PATH}`,
      response_status: status,
      request_data: { query: { format: conn.format } },
      error_message: reason
    }))

  const release = (conn: Connection) =>
    Effect.suspend(() => {
      const userId = conn.takeSlot()
      if (userId === undefined) return Effect.void
      return Effect.andThen(registry.endSession(conn.id), registry.release(userId, conn.id))
    })

  /**
   * The user's slot: `admitted` (the connection then holds it), `full`, or `refused` when the
   * registry cannot decide and RATE_LIMIT_FAIL_MODE=closed (the connection is then closed 1013).
   */
  const claimSlot = (conn: Connection, user: Principal) =>
    Effect.gen(function*() {
      const slot = yield* Effect.result(registry.acquire(user.id, conn.id, config.wsMaxConnectionsPerUser))
      if (slot._tag === "Success") {
        if (slot.success) conn.holdSlot(user.id)
        return slot.success ? "admitted" : "full"
      }
      rateLimitStoreErrorsTotal.inc({ limit_type: "websocket_connection" })
      // An outage of Redis, logged when it begins (docs/operations.md#outages), not per connection.
      yield* Effect.flatMap(Effect.service(Outages), (outages) =>
        outages.failed("redis", slot.failure.cause, "WebSocket connection slot", `failing ${config.rateLimitFailMode}`))
      if (config.rateLimitFailMode === "closed") {
        yield* registry.release(user.id, conn.id)
        conn.close(Close.TryAgainLater)
        return "refused"
      }
      conn.holdSlot(user.id) // held undecided: released like any other
      return "admitted"
    })

  /** Token check, then the user's slot; opens the connection or closes it with the documented code (docs/websocket.md#close-codes). */
  const authenticate = (conn: Connection, token: string, viaFrame: boolean) =>
    Effect.gen(function*() {
      const verified = yield* Effect.result(authenticateHeader(verifier, bearer(token)))
      if (conn.isClosed()) return
      if (verified._tag === "Failure") {
        wsConnectionsTotal.inc({ status: "rejected_auth" })
        return conn.close(Close.InvalidToken)
      }
      const user = verified.success
      const slot = yield* claimSlot(conn, user)
      if (slot === "refused") return
      if (slot === "full") {
        wsConnectionsTotal.inc({ status: "rejected_limit" })
        rateLimitHitsTotal.inc({ limit_type: "websocket_connection" })
        yield* recordRefusal(conn, user, 429, Close.TooManyConnections.reason)
        return conn.close(Close.TooManyConnections)
      }
      if (conn.isClosed()) return yield* release(conn) // the client left meanwhile
      yield* registry.startSession(conn.id, sessionEnd(user))
      if (!conn.open(user)) return yield* release(conn) // the client left while the session started
      wsConnectionsTotal.inc({ status: "accepted" })
      wsConnectionsActive.inc()
      if (viaFrame) conn.send(AUTH_OK_TEXT)
      deps.opened(conn)
      yield* Effect.logInfo("WebSocket connected").pipe(Effect.annotateLogs({ user_id: user.id, format: conn.format }))
    })

  /** Origin not permitted: 1008; the user, when a query token names one, gets an audit record. */
  const rejectOrigin = (conn: Connection, token: string | undefined) =>
    Effect.gen(function*() {
      wsConnectionsTotal.inc({ status: "rejected_auth" })
      conn.close(Close.OriginNotAllowed)
      if (token === undefined) return
      const user = yield* Effect.option(authenticateHeader(verifier, bearer(token)))
      if (user._tag === "Some") yield* recordRefusal(conn, user.value, 403, Close.OriginNotAllowed.reason)
    })

  const stopWaiting = (conn: Connection) => {
    const timer = awaiting.get(conn)
    if (timer === undefined) return false
    clearTimeout(timer)
    awaiting.delete(conn)
    return true
  }

  return {
    begin: (conn, request, url, format) => {
      if (format !== "json" && format !== "protobuf") return conn.close(Close.UnsupportedFormat)
      const token = queryToken(url) ?? request.headers.authorization
      if (!originAllowed(config.allowedWsOrigins, request.headers.origin)) return deps.fork(conn, rejectOrigin(conn, token))
      if (token !== undefined) return deps.fork(conn, authenticate(conn, token, false))
      awaiting.set(
        conn,
        setTimeout(() => {
          awaiting.delete(conn)
          conn.close(Close.AuthTimeout)
        }, config.wsAuthTimeoutSeconds * 1000)
      )
    },
    offer: (conn, frame) => {
      if (!stopWaiting(conn)) return false
      const parsed = frame.isBinary ? undefined : parseJsonFrame(frameText(frame))
      if (parsed?._tag !== "Auth" || typeof parsed.token !== "string") conn.close(Close.AuthenticationRequired)
      else deps.fork(conn, authenticate(conn, parsed.token, true))
      return true
    },
    reauthenticate: (conn, token) =>
      Effect.gen(function*() {
        const verified = typeof token === "string" ? yield* Effect.result(authenticateHeader(verifier, bearer(token))) : undefined
        if (verified === undefined || verified._tag === "Failure") return conn.close(Close.InvalidToken)
        if (verified.success.id !== conn.user()?.id) return conn.close(Close.SubjectMismatch)
        conn.renew(verified.success)
        yield* registry.startSession(conn.id, sessionEnd(verified.success))
        conn.send(AUTH_OK_TEXT)
      }),
    end: (conn) => {
      stopWaiting(conn) // now, not when the release runs
      return release(conn)
    }
  }
}
