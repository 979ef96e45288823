/**
 * A small client for the `/web` WebSocket, with a plain Promise API: JSON text frames or
 * `?format=protobuf` binary frames (the messages of `proto/websocket.proto`, Ws/ProtobufCodec.ts),
 * `request(pkgId, data)` answered by `req_id`, broadcasts to a callback, re-authentication before
 * the token's `exp`, and reconnection with bounded, jittered backoff after an abnormal close. Its
 * states (connecting, authenticating, open, reconnecting) are one state machine, kept whole here;
 * what needs no connection — the messages it hands back, `WsClosedError`, the backoff delays, the
 * token's `exp`, request ids — is WsProtocol.ts.
 *
 * Built on the standard `WebSocket` and `crypto` globals only (browsers, Node ≥ 22, Deno, Bun).
 * A browser's WebSocket cannot set headers, so the token always travels in the first frame
 * (`{"type":"auth","token":"Bearer …"}`), which every runtime can send and which keeps it out of
 * URLs and access logs.
 */
import { BROADCAST_REQ_ID, Close } from "../Ws/Protocol.ts"
import {
  type BroadcastEvent,
  decodeProtobufResponse,
  encodeProtobufRequest,
  randomUuid,
  reconnectDelay,
  tokenExpiry,
  WsClosedError,
  type WsResponse
} from "./WsProtocol.ts"

export type WsState = "connecting" | "open" | "reconnecting" | "closed"

export interface WsClientOptions {
  /** The service (`http://host:8000`) or its WebSocket URL (`ws://host:8000/web`). */
  readonly url: string
  readonly format?: "json" | "protobuf"
  /** A valid access token (bare JWT): called on every connect and before the current one expires. */
  readonly token: () => string | Promise<string>
  readonly onBroadcast?: (event: BroadcastEvent) => void
  /** Every state change; on "reconnecting", the close that caused it. */
  readonly onStateChange?: (state: WsState, close?: { readonly code: number; readonly reason: string }) => void
  /** Re-authenticate this many seconds before the token's `exp` (default 30). */
  readonly reauthBeforeSeconds?: number
  /**
   * Backoff after an abnormal close, `maxAttempts` (10) in a row: the n-th delay is a random point
   * below `initialDelayMs` (250) doubling up to `maxDelayMs` (10 000) — so the clients of a
   * restarted server do not all come back at the same instants. `random` (default `Math.random`,
   * values in [0, 1)) is there for tests.
   */
  readonly reconnect?: {
    readonly initialDelayMs?: number
    readonly maxDelayMs?: number
    readonly maxAttempts?: number
    readonly random?: () => number
  } | false
  /** Reject a request not answered within this time (default 30 000 ms). */
  readonly requestTimeoutMs?: number
}

type Timer = ReturnType<typeof setTimeout>

/** In Node, a timer that alone keeps the process running is unref'd; browsers have no such notion. */
const unref = (timer: Timer): Timer => {
  const node = timer as unknown as { readonly unref?: unknown }
  if (typeof node === "object" && node !== null && typeof node.unref === "function") node.unref()
  return timer
}

/** Closes after which connecting again makes sense: going away, abnormal, server errors, session expiry. */
const reconnectable = (code: number, reason: string) =>
  code === 1001 || code === 1005 || code === 1006 || code === 1011 || code === 1012 || code === 1013 ||
  code === 1014 || (code === Close.SessionExpired.code && reason === Close.SessionExpired.reason)

interface Pending {
  readonly resolve: (response: WsResponse) => void
  readonly reject: (error: Error) => void
  readonly timer: Timer
}

export interface WsClient {
  /** Sends a request and resolves with its response (any status_code). Waits while (re)connecting. */
  readonly request: <D = unknown>(pkgId: number, data?: Record<string, unknown>) => Promise<WsResponse<D>>
  /** Resolves once connected and authenticated (again, after a reconnect). */
  readonly ready: () => Promise<void>
  readonly state: () => WsState
  /** Closes with 1000; pending requests are rejected; no reconnection. */
  readonly close: () => Promise<void>
}

/** Connects (first frame `{"type":"auth"}`, then `auth_ok`) and resolves once authenticated. */
export const connectWs = async (options: WsClientOptions): Promise<WsClient> => {
  if (typeof globalThis.WebSocket !== "function") {
    throw new Error("connectWs needs the standard WebSocket global (browsers, Node ≥ 22, Deno, Bun)")
  }
  const format = options.format ?? "json"
  const base = options.url.replace(/^http/, "ws")
  const url = new URL(/\/web\/?$/.test(new URL(base).pathname) ? base : `${base.replace(/\/$/, "")}/web`)
  if (format === "protobuf") url.searchParams.set("format", "protobuf")
  const reauthMarginMs = (options.reauthBeforeSeconds ?? 30) * 1000
  const backoff = options.reconnect === false ? undefined : {
    bounds: { initialDelayMs: options.reconnect?.initialDelayMs ?? 250, maxDelayMs: options.reconnect?.maxDelayMs ?? 10_000 },
    maxAttempts: options.reconnect?.maxAttempts ?? 10,
    random: options.reconnect?.random ?? Math.random
  }
  const requestTimeoutMs = options.requestTimeoutMs ?? 30_000

  let state: WsState = "connecting"
  let socket: WebSocket | undefined
  let closedByUser = false
  let finalError: WsClosedError | undefined
  let reauthTimer: Timer | undefined
  let reconnectTimer: Timer | undefined
  const pending = new Map<string, Pending>()
  let waiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = []

  const setState = (next: WsState, close?: { code: number; reason: string }) => {
    state = next
    options.onStateChange?.(next, close)
  }
  const settleWaiters = (error?: Error) => {
    const list = waiters
    waiters = []
    for (const w of list) {
      if (error === undefined) w.resolve()
      else w.reject(error)
    }
  }
  const rejectPending = (error: Error) => {
    for (const [id, p] of pending) {
      clearTimeout(p.timer)
      pending.delete(id)
      p.reject(error)
    }
  }

  const scheduleReauth = (token: string) => {
    clearTimeout(reauthTimer)
    const exp = tokenExpiry(token)
    if (exp === undefined) return
    // Never sooner than 1 s, so a provider that hands back the same token cannot spin.
    const delay = Math.max(exp - reauthMarginMs - Date.now(), 1000)
    reauthTimer = unref(setTimeout(() => void reauth(), delay))
  }

  const reauth = async () => {
    const ws = socket
    if (ws === undefined || ws.readyState !== WebSocket.OPEN) return
    try {
      const token = await options.token()
      if (ws !== socket || ws.readyState !== WebSocket.OPEN) return
      ws.send(JSON.stringify({ type: "auth", token: `Bearer ${token}` }))
      scheduleReauth(token)
    } catch {
      // No fresh token now: try again shortly; the server closes 4001 at expiry otherwise.
      reauthTimer = unref(setTimeout(() => void reauth(), 5000))
    }
  }

  /** A frame: text is JSON, binary (an ArrayBuffer: `binaryType` is set so) a protobuf Response. */
  const onFrame = (raw: unknown) => {
    let message: WsResponse | { type?: unknown }
    try {
      if (typeof raw === "string") message = JSON.parse(raw)
      else if (raw instanceof ArrayBuffer) message = decodeProtobufResponse(new Uint8Array(raw))
      else return
    } catch {
      return
    }
    if (typeof message !== "object" || message === null || !("req_id" in message)) return // auth_ok
    if (message.req_id === BROADCAST_REQ_ID) {
      options.onBroadcast?.(message.data as BroadcastEvent)
      return
    }
    const entry = pending.get(message.req_id)
    if (entry === undefined) return
    pending.delete(message.req_id)
    clearTimeout(entry.timer)
    entry.resolve(message)
  }

  /** One connection attempt: resolves once `auth_ok` arrives, rejects with the close. */
  const open = async (): Promise<void> => {
    const token = await options.token()
    return new Promise<void>((resolve, reject) => {
      const ws = new WebSocket(url)
      ws.binaryType = "arraybuffer"
      socket = ws
      let authenticated = false
      ws.addEventListener("open", () => ws.send(JSON.stringify({ type: "auth", token: `Bearer ${token}` })))
      ws.addEventListener("message", (event: MessageEvent) => {
        const raw: unknown = event.data
        if (!authenticated && typeof raw === "string") {
          try {
            if ((JSON.parse(raw) as { type?: unknown }).type === "auth_ok") {
              authenticated = true
              scheduleReauth(token)
              resolve()
              return
            }
          } catch {
            // not JSON: handled below
          }
        }
        onFrame(raw)
      })
      // An error event is always followed by the close event, which settles everything.
      ws.addEventListener("error", () => {})
      ws.addEventListener("close", (event: CloseEvent) => {
        const { code, reason } = event
        if (ws !== socket) return
        clearTimeout(reauthTimer)
        rejectPending(new WsClosedError(code, reason))
        if (!authenticated) reject(new WsClosedError(code, reason))
        else onDisconnect(code, reason)
      })
    })
  }

  const finish = (error: WsClosedError) => {
    finalError = error
    setState("closed", { code: error.code, reason: error.reason })
    settleWaiters(error)
    rejectPending(error)
  }

  /** Connects, retrying with backoff; `attempt` counts the failures in a row. */
  const connectLoop = (attempt: number, lastClose: { code: number; reason: string }) => {
    if (closedByUser) return
    if (backoff === undefined || attempt >= backoff.maxAttempts) {
      finish(new WsClosedError(lastClose.code, lastClose.reason))
      return
    }
    reconnectTimer = setTimeout(() => {
      open().then(
        () => {
          if (closedByUser) return
          setState("open")
          settleWaiters()
        },
        (error: unknown) => {
          const close = error instanceof WsClosedError ? error : { code: 1006, reason: String(error) }
          if (!reconnectable(close.code, close.reason)) finish(new WsClosedError(close.code, close.reason))
          else connectLoop(attempt + 1, close)
        }
      )
    }, reconnectDelay(attempt, backoff.bounds, backoff.random))
  }

  const onDisconnect = (code: number, reason: string) => {
    if (closedByUser) return
    if (backoff === undefined || !reconnectable(code, reason)) {
      finish(new WsClosedError(code, reason))
      return
    }
    setState("reconnecting", { code, reason })
    connectLoop(0, { code, reason })
  }

  const ready = (): Promise<void> => {
    if (state === "open") return Promise.resolve()
    if (state === "closed") return Promise.reject(finalError ?? new WsClosedError(1000, "Closed"))
    return new Promise((resolve, reject) => waiters.push({ resolve, reject }))
  }

  const client: WsClient = {
    ready,
    state: () => state,
    request: async <D>(pkgId: number, data: Record<string, unknown> = {}) => {
      await ready()
      const ws = socket!
      const reqId = randomUuid()
      return new Promise<WsResponse<D>>((resolve, reject) => {
        const timer = setTimeout(() => {
          pending.delete(reqId)
          reject(new Error(`No response to ${reqId} within ${requestTimeoutMs} ms`))
        }, requestTimeoutMs)
        pending.set(reqId, { resolve: resolve as (r: WsResponse) => void, reject, timer })
        ws.send(
          format === "protobuf"
            ? encodeProtobufRequest(pkgId, reqId, data)
            : JSON.stringify({ pkg_id: pkgId, req_id: reqId, data })
        )
      })
    },
    close: async () => {
      closedByUser = true
      clearTimeout(reauthTimer)
      clearTimeout(reconnectTimer)
      const ws = socket
      const error = new WsClosedError(1000, "Client closed")
      if (state !== "closed") finish(error)
      if (ws === undefined || ws.readyState === WebSocket.CLOSED) return
      await new Promise<void>((resolve) => {
        ws.addEventListener("close", () => resolve(), { once: true })
        ws.close(1000, "Client closed")
      })
    }
  }

  try {
    await open()
  } catch (error) {
    closedByUser = true
    throw error
  }
  setState("open")
  return client
}
