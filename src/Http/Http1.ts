/**
 * HTTP/1.1 connection discipline on top of Node's server (RFC 9112), per connection:
 *
 * - One answer per request, in order. Node queues the responses of pipelined requests in order,
 *   but a request its parser refuses (a header section over 16 KiB, a line that is not HTTP, a bad
 *   chunk size, a timeout) is handed to `clientError`, which would answer on the raw socket at
 *   once and close it: the answers still being produced for the requests before it were lost. Here
 *   the refusal waits until every request before it is answered, then goes out, then the close.
 * - Data after a request with `Connection: close` (or an HTTP/1.0 one without keep-alive) is not
 *   a request to refuse: it is ignored; Node closes after that request's answer.
 * - Requests behind a request that is not safe (anything but GET, HEAD, OPTIONS, TRACE) are held
 *   until it is answered, so a pipelined read sees the write before it; a request that is not
 *   safe waits for every request before it. Safe requests behind safe ones run side by side.
 *   A held request's body is not read: Node stops reading the socket once the body's buffer is
 *   full, so holding costs a bounded amount of memory.
 * - Refused before the app: an HTTP/1.0 request with Transfer-Encoding (faulty framing: what
 *   follows its body would be read as another request), two Host lines, two Authorization lines,
 *   an HTTP/1.1 request without Host (the server must be created with `requireHostHeader: false`).
 *   400 `{detail: "Bad request"}` in its turn, then the close; nothing after it on the connection
 *   is processed.
 * - Upgrades wait for the answers before them too (the 101 must not come before them).
 *
 * Requests refused here never reach the app's front door, so they are counted here, in
 * `http_requests_total` with the endpoint `unmatched`.
 * One module (about 310 lines): one connection's ordering of answers, refusals and upgrades, read together.
 */
import { METHODS, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { Socket } from "node:net"
import type { Duplex } from "node:stream"
import { correlationIdFrom } from "../Edge/RequestIds.ts"
import { refuseOnSocket } from "../Edge/Upgrades.ts"
import { httpSeries } from "../Observability/Metrics.ts"
import { BadRequest, errorStatus, RequestHeaderFieldsTooLarge, RequestTimeout } from "../Errors.ts"

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS", "TRACE"])
/** Methods llhttp parses: a bounded set of label values for requests refused before the app. */
const KNOWN_METHODS = new Set(METHODS)
/** Headers a request may carry once: a second line is ambiguous (which one does a proxy keep?). */
const SINGLE_HEADERS = new Set(["host", "authorization"])
/** After its last answer, a closing connection gets this long to read it before the socket is cut. */
const CLOSE_GRACE_MS = 2_000
/**
 * Unanswered requests of one connection past which its socket is no longer read (until half are
 * answered): held requests are memory, and a client could pipeline thousands behind one write.
 * The parser still finishes the chunk it holds (at most 64 KiB), so the bound is approximate.
 */
const MAX_UNANSWERED = 128

interface Refusal {
  readonly status: number
  readonly detail: string
  /** For `http_requests_total` (counted when the refusal is written). */
  readonly method: string
  readonly correlationId?: string
}

/** A refusal of the error table (Errors.ts): its status and `{detail}`. */
const refusal = (error: BadRequest | RequestHeaderFieldsTooLarge | RequestTimeout, method: string, correlationId?: string): Refusal => ({
  status: errorStatus[error._tag].http,
  detail: error.detail,
  method,
  ...(correlationId === undefined ? {} : { correlationId })
})

interface Entry {
  readonly safe: boolean
  /** held: not handed to the app yet; running: handed over, not answered yet. */
  state: "held" | "running"
  /** Hands the request to the app (or the upgrade to its handler). */
  readonly run: () => void
  /** The request is answered by this refusal on the raw socket once every entry before it is. */
  refusal?: Refusal
  /** Set for app requests: the parser may fail inside its body. */
  readonly req?: IncomingMessage
  readonly res?: ServerResponse
}

interface ConnectionState {
  /** Requests not answered yet, in arrival order. */
  readonly entries: Array<Entry>
  /** A refusal was decided: nothing more is taken from this connection. */
  closing: boolean
  /** The parser failed: its later errors on this connection are the same failure. */
  parserFailed: boolean
  /** Requests seen on this connection (for the method label of a parser refusal). */
  seen: number
  /** The socket is not read because too many requests wait (`MAX_UNANSWERED`). */
  paused: boolean
  /** The last request parsed: the parser may fail inside its body. */
  last: IncomingMessage | undefined
}

/** What Node's parser refused (Node would answer a bare 400 without a body; every error body is JSON). */
const clientErrorAnswer = (code: string | undefined, method: string): Refusal =>
  refusal(
    code === "HPE_HEADER_OVERFLOW"
      ? RequestHeaderFieldsTooLarge.instance
      : code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? RequestTimeout.instance
      : BadRequest.instance,
    method
  )

const countRefused = (refusal: Refusal) =>
  httpSeries(KNOWN_METHODS.has(refusal.method) ? refusal.method : "UNKNOWN", "unmatched").total(refusal.status).inc()

/** Ends a connection whose last answer was written, and cuts it if the client keeps it open. */
const closeGracefully = (socket: Duplex) => {
  if (socket.destroyed) return
  socket.end()
  const timer = setTimeout(() => socket.destroy(), CLOSE_GRACE_MS)
  timer.unref()
  socket.once("close", () => clearTimeout(timer))
}

const writeRefusal = (socket: Duplex, refusal: Refusal) => {
  countRefused(refusal)
  const { status, detail, correlationId } = refusal
  refuseOnSocket(socket, status, detail, { head: refusal.method === "HEAD", ...(correlationId === undefined ? {} : { correlationId }) })
  closeGracefully(socket)
}

/** The method of a request the parser refused, when the failed packet is the connection's first bytes. */
const refusedMethod = (error: NodeJS.ErrnoException & { rawPacket?: unknown }, socket: Socket, seen: number): string => {
  const packet = error.rawPacket
  if (seen > 0 || !Buffer.isBuffer(packet) || socket.bytesRead !== packet.length) return "UNKNOWN"
  const space = packet.indexOf(0x20)
  return space > 0 ? packet.subarray(0, Math.min(space, 32)).toString("latin1") : "UNKNOWN"
}

const repeatedHeader = (req: IncomingMessage): boolean => {
  const seen = new Set<string>()
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase()
    if (!SINGLE_HEADERS.has(name)) continue
    if (seen.has(name)) return true
    seen.add(name)
  }
  return false
}

/** Why the request is refused before the app, if it is. */
const framingRefusal = (req: IncomingMessage): Refusal | undefined => {
  const http10WithTransferEncoding = req.httpVersionMajor === 1 && req.httpVersionMinor === 0 &&
    req.headers["transfer-encoding"] !== undefined
  // Node refuses this itself unless `requireHostHeader: false`, with a bare 400 (no JSON body).
  const http11WithoutHost = req.httpVersionMajor === 1 && req.httpVersionMinor === 1 && req.headers.host === undefined
  if (!http10WithTransferEncoding && !http11WithoutHost && !repeatedHeader(req)) return undefined
  const correlation = req.headers["x-correlation-id"]
  return refusal(BadRequest.instance, req.method ?? "UNKNOWN", correlationIdFrom(typeof correlation === "string" ? correlation : undefined))
}

/**
 * Takes the server's `request`, `checkContinue` and `upgrade` events through the per-connection
 * discipline above, and answers `clientError`. Install after every other `emit` wrapper (it must
 * see events first).
 */
export const serveHttp1 = (server: Server): { readonly clientError: (error: NodeJS.ErrnoException, socket: Duplex) => void } => {
  const connections = new WeakMap<Duplex, ConnectionState>()

  const stateOf = (socket: Duplex): ConnectionState => {
    let state = connections.get(socket)
    if (state === undefined) {
      const created: ConnectionState = { entries: [], closing: false, parserFailed: false, seen: 0, paused: false, last: undefined }
      state = created
      connections.set(socket, created)
      socket.once("close", () => {
        // Held requests of a gone client are never processed.
        created.closing = true
        created.entries.length = 0
      })
    }
    return state
  }

  /** Hands over what may run now; writes a refusal whose turn came. */
  const pump = (socket: Duplex, state: ConnectionState) => {
    const entries = state.entries
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i]!
      if (entry.refusal !== undefined && i === 0) {
        // Its turn: everything before it is answered. A request the parser failed in the body of
        // may have been answered by the app already (its answer is going out: `answered` closes
        // after it) or have started answering (the close cuts it short); else the refusal is its
        // answer and whatever the app writes later is discarded.
        if (entry.res?.writableEnded === true) return
        entries.length = 0
        if (entry.res?.headersSent === true || socket.destroyed || !socket.writable) return closeGracefully(socket)
        return writeRefusal(socket, entry.refusal)
      }
      if (entry.refusal !== undefined) return
      if (entry.state === "running") {
        if (!entry.safe) return
        continue
      }
      if (!entry.safe && i > 0) return
      if (socket.destroyed) return
      entry.state = "running"
      entry.run()
      if (!entry.safe) return
    }
  }

  const answered = (socket: Duplex, state: ConnectionState, entry: Entry) => {
    const index = state.entries.indexOf(entry)
    if (index < 0) return
    state.entries.splice(index, 1)
    if (state.paused && state.entries.length <= MAX_UNANSWERED / 2) {
      state.paused = false
      socket.resume()
    }
    // The request the parser failed in was answered by the app after all: just close.
    if (state.closing && state.entries.length === 0) return closeGracefully(socket)
    pump(socket, state)
  }

  const admit = (req: IncomingMessage, res: ServerResponse, emit: () => void) => {
    const socket = req.socket
    const state = stateOf(socket)
    state.seen++
    state.last = req
    if (state.closing) return // after a refusal: not processed, never answered
    const refusal = framingRefusal(req)
    if (refusal !== undefined) {
      state.closing = true
      state.entries.push({ safe: true, state: "held", run: () => {}, refusal })
      return pump(socket, state)
    }
    const entry: Entry = { safe: SAFE_METHODS.has(req.method ?? ""), state: "held", run: emit, req, res }
    let done = false
    const finish = () => {
      if (done) return
      done = true
      answered(socket, state, entry)
    }
    res.once("finish", finish)
    res.once("close", finish)
    state.entries.push(entry)
    if (state.entries.length >= MAX_UNANSWERED && !state.paused) {
      state.paused = true
      socket.pause()
    }
    pump(socket, state)
  }

  const admitUpgrade = (req: IncomingMessage, socket: Duplex, emit: () => void) => {
    const state = connections.get(socket)
    const refusal = framingRefusal(req)
    if (state === undefined || state.entries.length === 0) return refusal === undefined ? emit() : writeRefusal(socket, refusal)
    if (state.closing) return // behind a refusal: the socket closes after it
    state.seen++
    state.closing = true
    // The socket leaves HTTP: the upgrade is the last thing on it, after the answers before it.
    const entry: Entry = refusal !== undefined
      ? { safe: false, state: "held", run: () => {}, refusal }
      : { safe: false, state: "held", run: () => {
        state.entries.length = 0
        emit()
      } }
    state.entries.push(entry)
    pump(socket, state)
  }

  const onClientError = (error: NodeJS.ErrnoException, socket: Duplex) => {
    const state = stateOf(socket)
    if (state.parserFailed) return // the same failure, seen again on the next bytes
    state.parserFailed = true
    if (error.code === "ECONNRESET" || !socket.writable) {
      socket.destroy()
      return
    }
    // Bytes after a request that closes the connection: not processed, not answered (Node closes
    // after that request's answer).
    if (error.code === "HPE_CLOSED_CONNECTION") return
    state.closing = true
    // A failure inside a body: that request's answer is the refusal, unless the app answered it
    // already (without reading the whole body): then nothing is left to answer, only to close.
    const inBody = state.last !== undefined && !state.last.complete ? state.last : undefined
    const failing = inBody === undefined ? undefined : state.entries.find((entry) => entry.req === inBody)
    if (inBody !== undefined && failing === undefined) {
      if (state.entries.length === 0) closeGracefully(socket)
      return
    }
    const refusal = clientErrorAnswer(error.code, inBody?.method ?? refusedMethod(error, socket as Socket, state.seen))
    if (failing !== undefined) failing.refusal = refusal
    else state.entries.push({ safe: true, state: "held", run: () => {}, refusal })
    pump(socket, state)
  }

  server.on("clientError", onClientError)
  const emit = server.emit
  server.emit = function(this: Server, event: string | symbol, ...args: Array<unknown>) {
    const forward = () => Reflect.apply(emit, this, [event, ...args]) as boolean
    if (event === "request" || event === "checkContinue") {
      const [req, res] = args as [IncomingMessage, ServerResponse]
      admit(req, res, () => void forward())
      return true
    }
    if (event === "upgrade") {
      const [req, socket] = args as [IncomingMessage, Duplex]
      admitUpgrade(req, socket, () => void forward())
      return true
    }
    return forward()
  } as Server["emit"]
  return { clientError: onClientError }
}
