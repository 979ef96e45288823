/**
 * A `ws` client for tests: every frame the server sends lands in a queue to await (responses by
 * req_id, broadcasts, auth frames), and the close code and reason are a promise — so tests await
 * events instead of sleeping.
 */
import { randomUUID } from "node:crypto"
import protobuf from "protobufjs"
import WebSocket from "ws"

export const ZERO_REQ_ID = "00000000-0000-0000-0000-000000000000"

export interface Envelope {
  readonly pkg_id: number
  readonly req_id: string
  readonly status_code: number
  readonly data: unknown
  readonly meta: Record<string, unknown> | null
}

export interface Closed {
  readonly code: number
  readonly reason: string
}

/** A queue whose `take` waits for the next item matching a predicate. */
export class Mailbox<A> {
  private readonly items: Array<A> = []
  private readonly waiters: Array<{ readonly match: (a: A) => boolean; readonly resolve: (a: A) => void }> = []

  put(item: A) {
    const index = this.waiters.findIndex((w) => w.match(item))
    if (index >= 0) this.waiters.splice(index, 1)[0]!.resolve(item)
    else this.items.push(item)
  }

  take(match: (a: A) => boolean = () => true): Promise<A> {
    const index = this.items.findIndex(match)
    if (index >= 0) return Promise.resolve(this.items.splice(index, 1)[0]!)
    return new Promise((resolve) => this.waiters.push({ match, resolve }))
  }

  get size() {
    return this.items.length
  }
}

/**
 * Decoders built from the `.proto` text the server serves. With `defaults`, fields at their proto3
 * default (absent on the wire) decode to it (`""`, `0`, `false`), as most clients' decoders show them.
 */
export const protoCodec = (protoText: string, options: { readonly defaults?: boolean } = {}) => {
  const root = protobuf.parse(protoText, { keepCase: true }).root
  const Request = root.lookupType("authordirectory.websocket.Request")
  const Response = root.lookupType("authordirectory.websocket.Response")
  return {
    encodeRequest: (pkgId: number, reqId: string, data: unknown, method = "") =>
      Request.encode(Request.fromObject({ pkg_id: pkgId, req_id: reqId, method, data_json: typeof data === "string" ? data : JSON.stringify(data) })).finish(),
    decodeResponse: (bytes: Uint8Array): Envelope => {
      const m = Response.toObject(Response.decode(bytes), { defaults: options.defaults ?? false }) as {
        pkg_id?: number
        req_id?: string
        status_code?: number
        data_json?: string
        meta?: Record<string, unknown>
      }
      return {
        pkg_id: m.pkg_id ?? 0,
        req_id: m.req_id ?? "",
        status_code: m.status_code ?? 0,
        data: m.data_json === undefined ? null : JSON.parse(m.data_json),
        meta: m.meta ?? null
      }
    }
  }
}
export type ProtoCodec = ReturnType<typeof protoCodec>

export interface WsClientOptions {
  /** Put in the query as `Authorization=Bearer <token>` unless `query` says otherwise. */
  readonly token?: string
  readonly query?: Record<string, string>
  readonly headers?: Record<string, string>
  /** Decode binary frames with this codec (`?format=protobuf`). */
  readonly proto?: ProtoCodec
}

export interface WsClient {
  readonly ws: WebSocket
  /** Resolves with the 101 response's headers; rejects if the upgrade is refused. */
  readonly opened: Promise<Record<string, string | Array<string> | undefined>>
  readonly closed: Promise<Closed>
  /** Responses (non-zero req_id), broadcasts (zero req_id) and other JSON frames (auth_ok). */
  readonly responses: Mailbox<Envelope>
  readonly broadcasts: Mailbox<Envelope>
  readonly others: Mailbox<unknown>
  readonly send: (frame: unknown) => void
  /** Sends a request envelope and awaits the response with its req_id. */
  readonly request: (pkgId: number, data?: unknown, extra?: Record<string, unknown>) => Promise<Envelope>
  readonly response: (reqId: string) => Promise<Envelope>
  readonly close: () => Promise<Closed>
}

export const connectWs = (baseUrl: string, options: WsClientOptions = {}): WsClient => {
  const url = new URL(`${baseUrl.replace(/^http/, "ws")}/web`)
  const query = options.query ?? (options.token !== undefined ? { Authorization: `Bearer ${options.token}` } : {})
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v)
  if (options.proto !== undefined && !url.searchParams.has("format")) url.searchParams.set("format", "protobuf")
  const ws = new WebSocket(url, { headers: options.headers ?? {} })
  const responses = new Mailbox<Envelope>()
  const broadcasts = new Mailbox<Envelope>()
  const others = new Mailbox<unknown>()

  const opened = new Promise<Record<string, string | Array<string> | undefined>>((resolve, reject) => {
    ws.once("upgrade", (res) => resolve(res.headers))
    ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)))
    ws.once("error", reject)
  })
  opened.catch(() => {})
  const closed = new Promise<Closed>((resolve) => ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })))
  ws.on("error", () => {})

  ws.on("message", (data: Buffer, isBinary: boolean) => {
    let frame: unknown
    if (isBinary) {
      if (options.proto === undefined) return others.put(data)
      frame = options.proto.decodeResponse(data)
    } else {
      frame = JSON.parse(data.toString("utf8"))
    }
    const envelope = frame as Partial<Envelope>
    if (typeof envelope.req_id !== "string" || envelope.pkg_id === undefined) others.put(frame)
    else if (envelope.req_id === ZERO_REQ_ID) broadcasts.put(frame as Envelope)
    else responses.put(frame as Envelope)
  })

  const send = (frame: unknown) => {
    const payload = typeof frame === "string" || frame instanceof Uint8Array ? frame : JSON.stringify(frame)
    if (ws.readyState === WebSocket.CONNECTING) ws.once("open", () => ws.send(payload))
    else if (ws.readyState === WebSocket.OPEN) ws.send(payload)
  }

  const response = (reqId: string) => responses.take((e) => e.req_id === reqId)

  return {
    ws,
    opened,
    closed,
    responses,
    broadcasts,
    others,
    send,
    request: async (pkgId, data, extra = {}) => {
      const reqId = randomUUID()
      if (options.proto !== undefined) send(options.proto.encodeRequest(pkgId, reqId, data ?? {}))
      else send({ pkg_id: pkgId, req_id: reqId, ...(data !== undefined ? { data } : {}), ...extra })
      return response(reqId)
    },
    response,
    close: () => {
      ws.close(1000)
      return closed
    }
  }
}
