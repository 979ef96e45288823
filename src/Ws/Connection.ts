/**
 * One `/web` socket (docs/websocket.md): who it is, where it stands (handshake → open → closed), its
 * bounded outbound queue with one writer, and its inbox of frames waiting to be handled.
 *
 * Outbound: every frame of the connection — replies, broadcasts, auth_ok — goes through `send`,
 * which never waits: the frame joins the queue and the one writer hands frames to the socket while
 * the socket keeps up. A client that lets more than `SEND_BUFFER_MAX` bytes pile up (it does not
 * read) is dropped and counted (`ws_send_queue_overflows_total`), so a broadcast never waits on a
 * slow client.
 *
 * A message too large to hold (package 1's whole table) takes its place in the same queue as a
 * `FragmentedMessage` (`beginMessage`): when its turn comes it writes one WebSocket fragment at a
 * time, each only once the socket's buffer is under `WRITE_HIGH_WATER` (the producer waits on
 * `ready`, so the table is never buffered); frames queued behind it wait until its last fragment,
 * since no other data frame may come between the fragments of a message (RFC 6455 §5.4).
 *
 * Pings are answered here (not by `ws`, whose automatic pongs cut the TCP connection after 60
 * unflushed ones, with no Close frame): a pong counts toward the same bytes waiting to be sent, and
 * a ping that comes while more than `PONG_BUFFER_MAX` wait closes the connection 1008 `Policy
 * violation`. Pongs alone thus never reach the bound that drops a client for not reading data.
 *
 * Inbound: frames are handled one at a time, in order; past `INBOX_HIGH` waiting frames the
 * socket stops being read (TCP backpressure) until the inbox is down to `INBOX_LOW`.
 *
 * One module on purpose (~330 lines): the queue, the fragmented message and the inbox share the
 * one socket's state and its single writer; apart, each would reach into the others.
 */
import { type RawData, WebSocket } from "ws"
import type { Principal } from "../Domain/User.ts"
import { wsMessagesSent, wsSendQueueOverflowsTotal } from "../Observability/Metrics.ts"
import { Close, type CloseCode } from "./Protocol.ts"

export type Format = "json" | "protobuf"

/** `closed` as soon as either side starts closing. */
type Phase = "handshake" | "open" | "closed"

/** Bytes a connection may have waiting to be sent before it counts as not reading. */
export const SEND_BUFFER_MAX = 4 * 1024 * 1024
/** Bytes waiting to be sent past which a ping is a flood: the client does not read its pongs. */
export const PONG_BUFFER_MAX = SEND_BUFFER_MAX / 2
/** The writer stops handing frames to the socket above this many buffered bytes, until they flush. */
const WRITE_HIGH_WATER = 256 * 1024
/** Frames waiting to be handled before the socket stops being read, and when it reads again. */
const INBOX_HIGH = 64
const INBOX_LOW = 16

export interface InboundFrame {
  readonly data: RawData
  readonly isBinary: boolean
}

/** One message written in fragments, in its place among the connection's frames. */
export interface FragmentedMessage {
  /**
   * Resolves true once the next fragment may be written: everything queued before the message was
   * handed to the socket and the socket holds less than `WRITE_HIGH_WATER` bytes; false when the
   * connection is closing or gone (stop producing).
   */
  readonly ready: () => Promise<boolean>
  /** Writes one fragment (after `ready` said true); `last` completes the message. */
  readonly write: (chunk: string | Uint8Array, last: boolean) => void
  /** True once a fragment was written: the client holds part of a message. */
  readonly started: () => boolean
  /** Gives up a message none of whose fragments was written: the frames behind it flow again. */
  readonly cancel: () => void
}

export interface ConnectionInfo {
  readonly id: string
  readonly format: Format
  readonly correlationId: string
  /** For the connection's log lines when no span is open: the upgrade's `traceparent`, else the id's hex digits. */
  readonly traceId: string
  readonly ip: string
  readonly userAgent: string
}

export interface Connection extends ConnectionInfo {
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
  /** Queues a message that will be written in fragments (see `FragmentedMessage`). */
  readonly beginMessage: () => FragmentedMessage
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
    /** Claims the inbox for one handler fiber; false when one is at work or nothing waits. */
    readonly claim: () => boolean
    readonly release: () => void
  }
  /** A ping from the client: answered with a pong, or, from a client that does not read them, a 1008 close. */
  readonly answerPing: (data: Buffer) => void
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
  interface Pending {
    readonly message: FragmentedMessage
    /** The producer waiting for its turn or for the socket to drain. */
    waiter: ((go: boolean) => void) | undefined
    started: boolean
  }
  type Outgoing = { readonly payload: string | Uint8Array; readonly size: number } | { readonly fragmented: Pending }
  const outbox: Array<Outgoing> = []
  let queuedBytes = 0
  /** A frame handed to the socket will call back when flushed; the writer resumes then. */
  let awaitingFlush = false

  const headFragmented = (): Pending | undefined => {
    const head = outbox[0]
    return head !== undefined && "fragmented" in head ? head.fragmented : undefined
  }
  /** The fragmented message at the head may go on when the socket has room. */
  const wakeFragmented = () => {
    const pending = headFragmented()
    if (pending?.waiter === undefined) return
    if (ws.readyState !== WebSocket.OPEN || phase === "closed") return settle(pending, false)
    if (ws.bufferedAmount <= WRITE_HIGH_WATER) settle(pending, true)
  }
  const settle = (pending: Pending, go: boolean) => {
    const waiter = pending.waiter
    pending.waiter = undefined
    waiter?.(go)
  }
  /** The connection is closing or gone: every waiting producer stops. */
  const stopFragmented = () => {
    for (const item of outbox) if ("fragmented" in item) settle(item.fragmented, false)
  }

  /** Hands queued frames to the socket; a fragmented message at the head writes itself. */
  const write = (all: boolean) => {
    while (outbox.length > 0 && ws.readyState === WebSocket.OPEN) {
      const head = outbox[0]!
      if ("fragmented" in head) return wakeFragmented()
      if (!all && ws.bufferedAmount > WRITE_HIGH_WATER) {
        // Frames already handed over call `onFlushed` when they leave: the writer resumes then.
        awaitingFlush = true
        return
      }
      outbox.shift()
      queuedBytes -= head.size
      ws.send(head.payload, onFlushed)
      wsMessagesSent.inc()
    }
  }
  const onFlushed = () => {
    if (ws.bufferedAmount > WRITE_HIGH_WATER) return // a later frame's flush resumes the writer
    if (awaitingFlush) {
      awaitingFlush = false
      write(false)
    } else {
      wakeFragmented()
    }
  }

  const beginMessage = (): FragmentedMessage => {
    const pending: Pending = {
      waiter: undefined,
      started: false,
      message: {
        ready: () =>
          new Promise<boolean>((resolve) => {
            if (phase === "closed" || ws.readyState !== WebSocket.OPEN || !outbox.some((o) => "fragmented" in o && o.fragmented === pending)) {
              return resolve(false)
            }
            pending.waiter = resolve
            if (headFragmented() === pending) wakeFragmented()
          }),
        write: (chunk, last) => {
          if (headFragmented() !== pending || ws.readyState !== WebSocket.OPEN) return
          pending.started = true
          ws.send(chunk, { fin: last }, onFlushed)
          if (!last) return
          outbox.shift()
          wsMessagesSent.inc()
          write(false)
        },
        started: () => pending.started,
        cancel: () => {
          if (pending.started) return
          const index = outbox.findIndex((o) => "fragmented" in o && o.fragmented === pending)
          if (index < 0) return
          settle(pending, false)
          outbox.splice(index, 1)
          if (!awaitingFlush) write(false)
        }
      }
    }
    outbox.push({ fragmented: pending })
    if (!awaitingFlush) write(false)
    return pending.message
  }

  /** Drops a client that does not read (its queue passed the bound). */
  const drop = () => {
    phase = "closed"
    stopFragmented()
    outbox.length = 0
    queuedBytes = 0
    ws.terminate()
    wsSendQueueOverflowsTotal.inc()
    onDropped(conn)
  }

  const inbox: Array<InboundFrame> = []
  let handling = false

  const conn: Connection = {
    ...info,
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
      if (queuedBytes + ws.bufferedAmount > SEND_BUFFER_MAX) return drop()
      const size = byteLength(payload)
      outbox.push({ payload, size })
      queuedBytes += size
      if (!awaitingFlush) write(false)
    },
    beginMessage,
    close: (code) => {
      if (phase === "closed") return
      phase = "closed"
      // What was queued goes first: the close frame follows the last reply, as the client expects.
      // Frames behind a fragmented message stay behind it: the close interrupts the message, and
      // the client discards the fragments it holds (a close may come between fragments).
      write(true)
      stopFragmented()
      ws.close(code.code, code.reason)
    },
    terminate: () => {
      phase = "closed"
      stopFragmented()
      ws.terminate()
    },
    ended: () => {
      phase = "closed"
      stopFragmented()
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
      claim: () => {
        if (handling || inbox.length === 0 || phase !== "open") return false
        handling = true
        return true
      },
      release: () => {
        handling = false
      }
    },
    answerPing: (data) => {
      if (ws.readyState !== WebSocket.OPEN) return
      if (queuedBytes + ws.bufferedAmount + data.length > PONG_BUFFER_MAX) return conn.close(Close.PingFlood)
      ws.pong(data)
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
