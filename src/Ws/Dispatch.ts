/**
 * One frame of an open connection (docs/websocket.md#messages, docs/websocket.md#limits):
 * decode (unusable → 1003) → rate check → envelope and data schema → permission → handler
 * (Packages.ts) → audit record → reply; package 1's list is sent in fragments (Streaming.ts),
 * then audited. The envelope and the data are decoded before the rate check, once, for the
 * author read a message names: its read-cache generation rides on the check (Packages.ts
 * `prepare`); a schema failure is still answered after it. An auth frame counts as a message too
 * (rate check), then re-authenticates (Handshake.ts): a signature check per frame is not free.
 */
import { Effect, Option } from "effect"
import type { AuditLog } from "../AuditLogs/AuditLog.ts"
import { captureRequestData } from "../AuditLogs/RequestData.ts"
import type { AppConfigShape } from "../Config.ts"
import type { GenerationKey, Observed } from "../Domain/RequestContext.ts"
import type { Principal } from "../Domain/User.ts"
import { messageEntry } from "../AuditLogs/Entries.ts"
import { errorStatus, RateLimited, WsStatus } from "../Errors.ts"
import { rateLimitHitsTotal, wsMessageProcessingDuration } from "../Observability/Metrics.ts"
import { withSpanIfTraced } from "../Observability/Spans.ts"
import { makeAdmission } from "../RateLimit/Admission.ts"
import { RATE_WINDOW_MS, type RateLimiter } from "../RateLimit/RateLimiter.ts"
import { type Connection, type Format, frameBytes, frameText, type InboundFrame } from "./Connection.ts"
import { AnswerData, DATABASE_ERROR, type Package, type PackageHandlers, type PackageReply, type Prepared, preparedReply, reply } from "./Packages.ts"
import { encodeResponse, encodeResponseJson, parseProtobufFrame } from "./Protobuf.ts"
import { checkEnvelope, Close, type Frame, parseJsonFrame, WS_PATH } from "./Protocol.ts"
import { sendStreamedList, StreamedList } from "./Streaming.ts"

const INTERNAL_ERROR = reply(WsStatus.ERROR, { msg: "Internal server error" })

/** What a frame is, in the connection's format. */
export const decodeFrame = (format: Format, frame: InboundFrame): Frame => {
  if (frame.isBinary) return format === "protobuf" ? parseProtobufFrame(frameBytes(frame)) : { _tag: "Invalid" }
  const decoded = parseJsonFrame(frameText(frame))
  // In protobuf format only auth frames may be text (docs/websocket.md#protobuf).
  return format === "protobuf" && decoded._tag !== "Auth" ? { _tag: "Invalid" } : decoded
}

/** A response (or broadcast) envelope in the connection's format. */
export const encodeReply = (
  format: Format,
  pkgId: number,
  reqId: string,
  r: Pick<PackageReply, "status" | "data" | "meta">
): string | Uint8Array =>
  format === "json"
    ? JSON.stringify({ pkg_id: pkgId, req_id: reqId, status_code: r.status, data: r.data, meta: r.meta })
    : encodeResponse({ pkg_id: pkgId, req_id: reqId, status_code: r.status, data: r.data, meta: r.meta })

/** A reply whose `data` is a read answer: its JSON as kept, around it the envelope `encodeReply` writes. */
const encodeAnswer = (format: Format, pkgId: number, reqId: string, { answer, paged }: AnswerData): string | Uint8Array => {
  const meta = paged ? answer.meta : null
  return format === "json"
    ? `{"pkg_id":${pkgId},"req_id":${JSON.stringify(reqId)},"status_code":${WsStatus.OK},"data":${answer.dataJson},"meta":${
      paged ? answer.metaJson : "null"
    }}`
    : encodeResponseJson({ pkg_id: pkgId, req_id: reqId, status_code: WsStatus.OK, meta }, answer.dataJson)
}

const messageOf = (data: unknown): string | null =>
  typeof data === "object" && data !== null && "msg" in data && typeof data.msg === "string" ? data.msg : null

export interface DispatchDeps {
  readonly config: AppConfigShape
  readonly limiter: RateLimiter["Service"]
  readonly audit: AuditLog["Service"]
  /** The packages, their handlers bound to the services (Packages.ts). */
  readonly packages: PackageHandlers["Service"]
  /** An auth frame on an open connection. */
  readonly reauthenticate: (conn: Connection, token: unknown) => Effect.Effect<void>
}

/** Handles one inbound frame of an open connection; never fails. */
export const makeDispatch = (deps: DispatchDeps) => {
  const { audit, config, limiter } = deps
  /** When messages of a connection were refused for rate, in the trailing window (flood detection). */
  const refusals = new WeakMap<Connection, Array<number>>()
  const messageAdmission = makeAdmission(limiter, {
    limitType: "websocket_message",
    limit: config.wsMessageRateLimit,
    failMode: config.rateLimitFailMode
  })

  /**
   * Rate check: `retryAfter` when refused. `read`: the read cache's generation key the
   * check also reads (packages 1 and 2, with Redis), observed in the same round trip.
   */
  const messageRate = (user: Principal, read?: GenerationKey) =>
    Effect.map(messageAdmission.check(`ws:msg:user:${user.id}`, read), (a): { readonly retryAfter?: number; readonly observed?: Observed } => {
      if (a._tag === "Refused") return { retryAfter: a.retryAfterSeconds }
      const observed = Option.getOrUndefined(a.decision)?.observed
      return read !== undefined && observed !== undefined ? { observed: { key: read.key, value: observed } } : {}
    })

  /** docs/websocket.md#limits: a client refused `WS_MESSAGE_RATE_LIMIT` times in the trailing 60 s is flooding. */
  const flooding = (conn: Connection) => {
    const now = Date.now()
    let refused = refusals.get(conn)
    if (refused === undefined) refusals.set(conn, refused = [])
    refused.push(now)
    while (refused.length > 0 && refused[0]! <= now - RATE_WINDOW_MS) refused.shift()
    return refused.length >= config.wsMessageRateLimit
  }

  /**
   * A message refused for rate: closes a flooding connection (1008, true), else counts the hit in
   * `rate_limit_hits_total` (false).
   */
  const onRefused = (conn: Connection): boolean => {
    if (flooding(conn)) {
      conn.close(Close.MessageRateLimit)
      return true
    }
    rateLimitHitsTotal.inc({ limit_type: "websocket_message" })
    return false
  }

  /** Envelope → package → data schema; what does not decode is answered after the rate check. */
  const prepare = (frame: Extract<Frame, { _tag: "Request" }>, pkg: Package | undefined): Prepared => {
    const envelope = checkEnvelope(frame.fields)
    if (envelope._tag === "Failure") return preparedReply(reply(WsStatus.INVALID_DATA, { msg: "Invalid request data", errors: envelope.failure }))
    return pkg === undefined ? preparedReply(reply(WsStatus.INVALID_DATA, { msg: `Unknown pkg_id ${frame.pkgId}` })) : pkg.prepare(envelope.success.data)
  }

  /** A defect anywhere in a message's processing is answered like HTTP's 500. */
  const internalError = (defect: unknown) => Effect.as(Effect.logError("WebSocket message failed", defect), INTERNAL_ERROR)

  const request = (conn: Connection, user: Principal, frame: Extract<Frame, { _tag: "Request" }>) =>
    withSpanIfTraced(
      Effect.gen(function*() {
        const startedAt = new Date()
        const started = performance.now()
        const pkg = deps.packages.get(frame.pkgId)
        let result: PackageReply
        const prepared = yield* Effect.sync(() => prepare(frame, pkg)).pipe(
          Effect.catchDefect((defect) => Effect.map(internalError(defect), preparedReply))
        )
        const rate = yield* messageRate(user, prepared.generation)
        if (rate.retryAfter !== undefined) {
          if (onRefused(conn)) return
          result = reply(errorStatus.RateLimited.ws, { msg: RateLimited.instance.detail, retry_after: rate.retryAfter }, errorStatus.RateLimited.http)
        } else {
          result = yield* Effect.suspend(() => prepared.process(user, rate.observed)).pipe(Effect.catchDefect(internalError))
        }
        // A list sent in fragments is audited once it went out (or failed: then answered as a
        // database error when nothing was sent yet, else the connection was closed 1011).
        let streamed = false
        if (result.data instanceof StreamedList) {
          const outcome = yield* sendStreamedList(conn, frame.pkgId, frame.reqId, result.data)
          streamed = outcome !== "failed"
          if (outcome !== "sent") result = outcome === "failed" ? DATABASE_ERROR : INTERNAL_ERROR
        }
        const seconds = (performance.now() - started) / 1000
        wsMessageProcessingDuration.observe({ pkg_id: pkg === undefined ? "unknown" : String(pkg.pkgId) }, seconds)
        const data = frame.fields["data"]
        yield* audit.record(messageEntry(conn, user, {
          timestamp: startedAt,
          request_id: frame.reqId,
          duration_ms: Math.round(seconds * 1000),
          action_type: `WS:${pkg?.name ?? "UNKNOWN"}`,
          resource: `ws:${WS_PATH}`,
          status_code: result.status,
          response_status: result.httpStatus,
          request_data: captureRequestData(undefined, typeof data === "object" ? data : undefined),
          error_message: result.status === WsStatus.OK ? null : messageOf(result.data)
        }))
        if (!streamed) {
          conn.send(
            result.data instanceof AnswerData
              ? encodeAnswer(conn.format, frame.pkgId, frame.reqId, result.data)
              : encodeReply(conn.format, frame.pkgId, frame.reqId, result)
          )
        }
      }).pipe(Effect.annotateLogs({ request_id: frame.reqId })),
      "ws.message",
      () => ({ kind: "server", attributes: { pkg_id: frame.pkgId, "ws.req_id": frame.reqId, "user.id": user.id } })
    )

  /**
   * A re-auth frame is a message like any other for the rate limit (each costs a
   * signature check). Over the limit it is not processed and not answered — it has no req_id to
   * answer with; the session is not extended — and it counts toward flooding (1008).
   */
  const reauth = (conn: Connection, user: Principal, token: unknown) =>
    Effect.gen(function*() {
      const { retryAfter } = yield* messageRate(user)
      if (retryAfter === undefined) return yield* deps.reauthenticate(conn, token)
      if (onRefused(conn)) return
      yield* Effect.logInfo("Re-auth frame over the message rate limit ignored")
    })

  return {
    /** One frame, in order with the others of its connection. */
    handle: (conn: Connection, inbound: InboundFrame): Effect.Effect<void> => {
      const frame = decodeFrame(conn.format, inbound)
      const user = conn.user()
      if (frame._tag === "Invalid" || user === undefined) return Effect.sync(() => conn.close(Close.InvalidFormat))
      if (frame._tag === "Auth") return reauth(conn, user, frame.token)
      return request(conn, user, frame)
    }
  }
}
