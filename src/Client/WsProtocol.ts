/**
 * The /web client's side of the protocol (docs/websocket.md), apart from any connection: what
 * `connectWs` (Ws.ts) hands back — the response envelope, also for protobuf frames (the messages of
 * `proto/websocket.proto`, Ws/ProtobufCodec.ts), broadcasts, a close as `WsClosedError` — and the
 * rules it follows that need no connection: the full-jitter delays between reconnection attempts,
 * when to re-authenticate (the token's `exp`), and the `req_id` of each request.
 * Standard globals only (`atob`, `TextDecoder`, `crypto`), as the whole client kit.
 */
import { decodeResponse, encodeRequest } from "../Ws/ProtobufCodec.ts"

export { BROADCAST_REQ_ID } from "../Ws/Protocol.ts"

export interface PageMeta {
  readonly page: number
  readonly per_page: number
  readonly total: number
  readonly pages: number
  readonly next_cursor: string | null
  readonly has_more: boolean
}

export interface WsResponse<D = unknown> {
  readonly pkg_id: number
  readonly req_id: string
  /** 0 ok, 1 error, 2 invalid data, 3 permission denied. */
  readonly status_code: number
  readonly data: D
  readonly meta: PageMeta | null
}

export interface BroadcastEvent {
  readonly event: "author.created" | "author.updated" | "author.deleted"
  readonly timestamp: string
  readonly author: { readonly id: number; readonly name: string; readonly created_at: string }
}

/**
 * The connection is gone (closed by `close()`, by the server, or reconnection gave up). Like every
 * error of the client kit, an `Error` with a `_tag` (its name).
 */
export class WsClosedError extends Error {
  readonly _tag = "WsClosedError"
  readonly code: number
  readonly reason: string
  constructor(code: number, reason: string) {
    super(`WebSocket closed: ${code} ${reason}`)
    this.code = code
    this.reason = reason
    this.name = "WsClosedError"
  }
}

export const encodeProtobufRequest = (pkgId: number, reqId: string, data: unknown): Uint8Array<ArrayBuffer> =>
  encodeRequest({ pkg_id: pkgId, req_id: reqId, method: "", data_json: JSON.stringify(data) })

/** A `Response` message as the JSON envelope: `meta` null when absent, `next_cursor` null when "". */
export const decodeProtobufResponse = (bytes: Uint8Array): WsResponse => {
  const m = decodeResponse(bytes)
  return {
    pkg_id: m.pkg_id,
    req_id: m.req_id,
    status_code: m.status_code,
    data: m.data_json === "" ? null : JSON.parse(m.data_json),
    meta: m.meta === null ? null : { ...m.meta, next_cursor: m.meta.next_cursor === "" ? null : m.meta.next_cursor }
  }
}

/** The `exp` claim of a JWT (not verified: only to know when to re-authenticate). */
export const tokenExpiry = (token: string): number | undefined => {
  try {
    const base64 = (token.split(".")[1] ?? "").replace(/-/g, "+").replace(/_/g, "/")
    const bytes = Uint8Array.from(atob(base64.padEnd(Math.ceil(base64.length / 4) * 4, "=")), (c) => c.charCodeAt(0))
    const payload = JSON.parse(new TextDecoder().decode(bytes)) as { exp?: unknown }
    return typeof payload.exp === "number" ? payload.exp * 1000 : undefined
  } catch {
    return undefined
  }
}

/**
 * A v4 UUID for `req_id`. `crypto.randomUUID` exists only in secure contexts in browsers (https,
 * localhost); `getRandomValues` everywhere.
 */
export const randomUuid = (): string => {
  const crypto = globalThis.crypto
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID()
  const b = crypto.getRandomValues(new Uint8Array(16))
  b[6] = (b[6]! & 0x0f) | 0x40
  b[8] = (b[8]! & 0x3f) | 0x80
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("")
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

export interface ReconnectBounds {
  readonly initialDelayMs: number
  readonly maxDelayMs: number
}

/**
 * The delay before reconnection attempt `attempt` (0 for the first), "full jitter": a random point
 * below the documented bound `initialDelayMs·2^attempt`, which never passes `maxDelayMs`. Fixed
 * delays would bring every client dropped by one restart back at the same instants, each retry a
 * new stampede; drawing each delay under a bound that still doubles spreads them and still backs
 * off. `random` gives values in [0, 1).
 */
export const reconnectDelay = (attempt: number, bounds: ReconnectBounds, random: () => number = Math.random): number =>
  random() * Math.min(bounds.maxDelayMs, bounds.initialDelayMs * 2 ** attempt)
