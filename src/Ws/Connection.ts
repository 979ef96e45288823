/**
 * One `/web` socket (CONTRACT §5): who it is, where it stands (handshake → open → closed), its
 * bounded outbound queue with one writer, and its inbox of frames waiting to be handled.
 *
 * Outbound: every frame of the connection — replies, broadcasts, auth_ok — goes through `send`,
 * which never waits: the frame joins the queue and the one writer hands frames to the socket while
 * the socket keeps up. A client that lets more than `SEND_BUFFER_MAX` bytes pile up (it does not
 * read) is dropped, so a broadcast never waits on a slow client (ARCHITECTURE habit 7).
 *
 * Inbound: frames are handled one at a time, in order; past `INBOX_HIGH` waiting frames the
 * socket stops being read (TCP backpressure) until the inbox is down to `INBOX_LOW`.
 */
import { type RawData, WebSocket } from "ws"
import type { Principal } from "../Domain/User.ts"
import { wsMessagesSent } from "../Observability/Metrics.ts"
import type { CloseCode } from "./Protocol.ts"

export type Format = "json" | "protobuf"

/** `closed` as soon as either side starts closing. */
export type Phase = "handshake" | "open" | "closed"

/** Bytes a connection may have waiting to be sent before it counts as not reading. */
export const SEND_BUFFER_MAX = 4 * 1024 * 1024
/** The writer stops handing frames to the socket above this many buffered bytes, until they flush. */
const WRITE_HIGH_WATER = 256 * 1024
/** Frames waiting to be handled before the socket stops being read, and when it reads again. */
const INBOX_HIGH = 64
const INBOX_LOW = 16

export interface InboundFrame {
  readonly data: RawData
  readonly isBinary: boolean
}

export interface ConnectionInfo {
  readonly id: string
  readonly format: Format
  readonly correlationId: string
  readonly ip: string
  readonly userAgent: string
}

export interface Connection extends ConnectionInfo {
  readonly ws: WebSocket
  readonly phase: () => Phase
  readonly isOpen: () => boolean
  readonly isClosed: () => boolean
  /** The authenticated user (open connections), or undefined during the handshake. */
  readonly user: () => Principal | undefined
  /** Handshake done: the connection serves `user`. False when it closed meanwhile. */
  readonly open: (user: Principal) => boolean
  /** A re-authentication of the same user (a later token). */
  readonly renew: (user: Principal) => void
  /** The user whose connection slot this connection holds in the registry. */
  readonly holdSlot: (userId: string) => void
  /** Gives the slot up for release (once): the user id, or undefined when none is held. */
  readonly takeSlot: () => string | undefined
  /** True once the connection was open (it counted as active). */
  readonly wasOpen: () => boolean
  /** Queues a frame for the writer; drops the client when its queue is over the bound. */
  readonly send: (payload: string | Uint8Array) => void
  /** Starts the closing handshake after the frames already queued. */
  readonly close: (code: CloseCode) => void
  /** Cuts the socket (no closing handshake). */
  readonly terminate: () => void
  /** The socket ended: nothing more is sent or handled. */
  readonly ended: () => void
  /** Inbound frames, handled in order by one fiber at a time. */
  readonly inbox: {
    readonly push: (frame: InboundFrame) => void
    readonly shift: () => InboundFrame | undefined
    readonly size: () => number
    /** Claims the inbox for one handler fiber; false when one is at work or nothing waits. */
    readonly claim: () => boolean
    readonly release: () => void
  }
  /** Heartbeat: false when the previous ping got no pong (the peer is dead). Sends a ping. */
  readonly ping: () => boolean
  readonly pong: () => void
}

/** The bytes of a frame (ws hands over a Buffer, a list of them or an ArrayBuffer). */
export const frameBytes = (frame: InboundFrame): Buffer => {
  const data = frame.data
  return Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data)
}

export const frameText = (frame: InboundFrame): string => frameBytes(frame).toString("utf8")

const byteLength = (payload: string | Uint8Array) =>
  typeof payload === "string" ? Buffer.byteLength(payload, "utf8") : payload.byteLength

export const makeConnection = (
  ws: WebSocket,
  info: ConnectionInfo,
  /** Called once when a client that does not read is dropped. */
  onDropped: (conn: Connection) => void
): Connection => {
  let phase: Phase = "handshake"
  let user: Principal | undefined
  let slot: string | undefined
  let wasOpen = false
  let alive = true

  // ---- outbound: the queue and its one writer
  const outbox: Array<{ readonly payload: string | Uint8Array; readonly size: number }> = []
  let queuedBytes = 0
  /** A frame handed to the socket will call back when flushed; the writer resumes then. */
  let awaitingFlush = false

  const write = (all: boolean) => {
    while (outbox.length > 0 && ws.readyState === WebSocket.OPEN) {
      if (!all && ws.bufferedAmount > WRITE_HIGH_WATER) {
        // Frames already handed over call `onFlushed` when they leave: the writer resumes then.
        awaitingFlush = true
        return
      }
      const { payload, size } = outbox.shift()!
      queuedBytes -= size
      ws.send(payload, onFlushed)
      wsMessagesSent.inc()
    }
  }
  const onFlushed = () => {
    if (!awaitingFlush) return
    if (ws.bufferedAmount > WRITE_HIGH_WATER) return // a later frame's flush resumes the writer
    awaitingFlush = false
    write(false)
  }

  const inbox: Array<InboundFrame> = []
  let handling = false

  const conn: Connection = {
    ...info,
    ws,
    phase: () => phase,
    isOpen: () => phase === "open",
    isClosed: () => phase === "closed",
    user: () => user,
    open: (u) => {
      if (phase !== "handshake") return false
      phase = "open"
      user = u
      wasOpen = true
      return true
    },
    renew: (u) => {
      user = u
    },
    holdSlot: (userId) => {
      slot = userId
    },
    takeSlot: () => {
      const held = slot
      slot = undefined
      return held
    },
    wasOpen: () => wasOpen,
    send: (payload) => {
      if (ws.readyState !== WebSocket.OPEN) return
      if (queuedBytes + ws.bufferedAmount > SEND_BUFFER_MAX) {
        phase = "closed"
        outbox.length = 0
        queuedBytes = 0
        ws.terminate()
        onDropped(conn)
        return
      }
      const size = byteLength(payload)
      outbox.push({ payload, size })
      queuedBytes += size
      if (!awaitingFlush) write(false)
    },
    close: (code) => {
      if (phase === "closed") return
      phase = "closed"
      // What was queued goes first: the close frame follows the last reply, as the client expects.
      write(true)
      ws.close(code.code, code.reason)
    },
    terminate: () => {
      phase = "closed"
      ws.terminate()
    },
    ended: () => {
      phase = "closed"
      outbox.length = 0
      queuedBytes = 0
      inbox.length = 0
    },
    inbox: {
      push: (frame) => {
        inbox.push(frame)
        if (inbox.length >= INBOX_HIGH && !ws.isPaused) ws.pause()
      },
      shift: () => {
        const next = inbox.shift()
        if (ws.isPaused && inbox.length <= INBOX_LOW) ws.resume()
        return next
      },
      size: () => inbox.length,
      claim: () => {
        if (handling || inbox.length === 0 || phase !== "open") return false
        handling = true
        return true
      },
      release: () => {
        handling = false
      }
    },
    ping: () => {
      if (!alive) return false
      alive = false
      ws.ping()
      return true
    },
    pong: () => {
      alive = true
    }
  }
  return conn
}
