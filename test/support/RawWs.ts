/**
 * A WebSocket client on a bare TCP socket, for tests that look at the frames themselves (a `ws`
 * client hands over whole messages only): the upgrade's HTTP status and headers, then every frame
 * the server sends — FIN bit, opcode, payload — in order, to await.
 */
import { randomBytes } from "node:crypto"
import { connect, type Socket } from "node:net"
import { Mailbox } from "./WsClient.ts"

export const Opcode = { Continuation: 0, Text: 1, Binary: 2, Close: 8, Ping: 9, Pong: 10 } as const

export interface RawFrame {
  readonly fin: boolean
  readonly opcode: number
  readonly payload: Buffer
}

export interface RawUpgrade {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  /** The response body when the upgrade was refused (the socket is then closed by the server). */
  readonly body: string
}

/** One message as it arrived: its first frame's opcode, how many frames carried it, its bytes. */
export interface RawMessage {
  readonly opcode: number
  readonly frames: number
  readonly payload: Buffer
}

export interface RawWsClient {
  readonly socket: Socket
  readonly upgraded: Promise<RawUpgrade>
  /** Every frame after the 101, control frames included. */
  readonly frames: Mailbox<RawFrame>
  /** Resolves when the server's socket ends. */
  readonly ended: Promise<void>
  /** Sent once the upgrade succeeded. */
  readonly sendText: (text: string) => void
  readonly sendBinary: (bytes: Uint8Array) => void
  /** The next data message, fragments joined; control frames between fragments are skipped (a close fails it). */
  readonly nextMessage: () => Promise<RawMessage>
  readonly destroy: () => void
}

/** One masked client frame (FIN set). */
export const encodeFrame = (opcode: number, payload: Buffer) => {
  // Client frames are masked (RFC 6455 §5.3).
  const mask = randomBytes(4)
  const length = payload.length
  const header = length < 126 ? Buffer.from([0x80 | opcode, 0x80 | length])
    : length < 65_536 ? Buffer.from([0x80 | opcode, 0x80 | 126, length >> 8, length & 0xff])
    : Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | 127]), (() => {
      const b = Buffer.alloc(8)
      b.writeBigUInt64BE(BigInt(length))
      return b
    })()])
  const masked = Buffer.alloc(length)
  for (let i = 0; i < length; i++) masked[i] = payload[i]! ^ mask[i % 4]!
  return Buffer.concat([header, mask, masked])
}

/** `ws://host:port/path?query`, with extra request headers. */
export const rawWs = (url: string, headers: Record<string, string> = {}): RawWsClient => {
  const target = new URL(url)
  const socket = connect(Number(target.port), target.hostname)
  const frames = new Mailbox<RawFrame>()
  let buffer = Buffer.alloc(0)
  let head: RawUpgrade | undefined
  let resolveUpgrade: (u: RawUpgrade) => void = () => {}
  let rejectUpgrade: (e: Error) => void = () => {}
  const upgraded = new Promise<RawUpgrade>((resolve, reject) => {
    resolveUpgrade = resolve
    rejectUpgrade = reject
  })
  upgraded.catch(() => {})
  const ended = new Promise<void>((resolve) => socket.once("close", () => resolve()))
  socket.on("error", (e) => rejectUpgrade(e))

  socket.on("connect", () => {
    const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("")
    socket.write(
      `GET ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n${extra}\r\n`
    )
  })

  const parseFrames = () => {
    for (;;) {
      if (buffer.length < 2) return
      const b0 = buffer[0]!
      const b1 = buffer[1]!
      let length = b1 & 0x7f
      let offset = 2
      if (length === 126) {
        if (buffer.length < 4) return
        length = buffer.readUInt16BE(2)
        offset = 4
      } else if (length === 127) {
        if (buffer.length < 10) return
        length = Number(buffer.readBigUInt64BE(2))
        offset = 10
      }
      if ((b1 & 0x80) !== 0) throw new Error("a server frame must not be masked")
      if (buffer.length < offset + length) return
      frames.put({ fin: (b0 & 0x80) !== 0, opcode: b0 & 0x0f, payload: buffer.subarray(offset, offset + length) })
      buffer = buffer.subarray(offset + length)
    }
  }

  socket.on("data", (chunk: Buffer) => {
    buffer = Buffer.concat([buffer, chunk])
    if (head === undefined) {
      const end = buffer.indexOf("\r\n\r\n")
      if (end < 0) return
      const lines = buffer.subarray(0, end).toString("latin1").split("\r\n")
      const status = Number(lines[0]!.split(" ")[1])
      const parsed: Record<string, string> = {}
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(":")
        parsed[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
      }
      buffer = buffer.subarray(end + 4)
      if (status !== 101) {
        // A refused upgrade: the body follows (Content-Length), then the server closes.
        const length = Number(parsed["content-length"] ?? "0")
        const finish = () => resolveUpgrade({ status, headers: parsed, body: buffer.subarray(0, length).toString("utf8") })
        if (buffer.length >= length) return finish()
        head = { status, headers: parsed, body: "" }
        socket.on("end", finish)
        return
      }
      head = { status, headers: parsed, body: "" }
      resolveUpgrade(head)
    }
    if (head.status === 101) parseFrames()
  })

  const nextMessage = async (): Promise<RawMessage> => {
    const parts: Array<Buffer> = []
    let opcode: number | undefined
    let count = 0
    for (;;) {
      const frame = await frames.take()
      if (frame.opcode === Opcode.Close) {
        throw new Error(`closed ${frame.payload.length >= 2 ? frame.payload.readUInt16BE(0) : ""} before the message ended`)
      }
      if (frame.opcode >= 8) continue // ping, pong
      if (opcode === undefined) {
        if (frame.opcode === Opcode.Continuation) throw new Error("a continuation frame without a message")
        opcode = frame.opcode
      } else if (frame.opcode !== Opcode.Continuation) {
        throw new Error(`opcode ${frame.opcode} inside a fragmented message`)
      }
      parts.push(frame.payload)
      count++
      if (frame.fin) return { opcode, frames: count, payload: Buffer.concat(parts) }
    }
  }

  return {
    socket,
    upgraded,
    frames,
    ended,
    // After the 101 (in order): the upgrade request must be the first bytes on the socket.
    sendText: (text) => void upgraded.then(() => socket.write(encodeFrame(Opcode.Text, Buffer.from(text, "utf8")))),
    sendBinary: (bytes) => void upgraded.then(() => socket.write(encodeFrame(Opcode.Binary, Buffer.from(bytes)))),
    nextMessage,
    destroy: () => socket.destroy()
  }
}

/** The code of a close frame's payload. */
export const closeCode = (frame: RawFrame) => (frame.payload.length >= 2 ? frame.payload.readUInt16BE(0) : 1005)
