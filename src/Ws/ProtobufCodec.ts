/**
 * The messages of `proto/websocket.proto` as a small table and a codec for it, with no dependency
 * and no file read: what the client kit needs to speak `?format=protobuf` in a browser, Deno or
 * Bun as well as Node. `MESSAGES` is checked against the `.proto` file (every message, field name,
 * number and type) and the codec against protobufjs compiled from that file, in both directions
 * (test/unit/ws.protobuf.codec.test.ts), so the file stays the one source of the schema.
 *
 * Proto3 rules: a field at its default (0, "", false, absent message) is not written and reads
 * back as that default; fields are written in number order; unknown fields are skipped.
 */

type Scalar = "int32" | "string" | "bool"

interface FieldSpec {
  readonly name: string
  readonly id: number
  readonly type: Scalar | "Metadata"
}

/** Every message of the `.proto` file, its fields in number order. */
export const MESSAGES = {
  Request: [
    { name: "pkg_id", id: 1, type: "int32" },
    { name: "req_id", id: 2, type: "string" },
    { name: "method", id: 3, type: "string" },
    { name: "data_json", id: 4, type: "string" }
  ],
  Metadata: [
    { name: "page", id: 1, type: "int32" },
    { name: "per_page", id: 2, type: "int32" },
    { name: "total", id: 3, type: "int32" },
    { name: "pages", id: 4, type: "int32" },
    { name: "next_cursor", id: 5, type: "string" },
    { name: "has_more", id: 6, type: "bool" }
  ],
  Response: [
    { name: "pkg_id", id: 1, type: "int32" },
    { name: "req_id", id: 2, type: "string" },
    { name: "status_code", id: 3, type: "int32" },
    { name: "data_json", id: 4, type: "string" },
    { name: "meta", id: 5, type: "Metadata" }
  ],
  Broadcast: [
    { name: "pkg_id", id: 1, type: "int32" },
    { name: "req_id", id: 2, type: "string" },
    { name: "data_json", id: 3, type: "string" }
  ]
} as const satisfies Record<string, ReadonlyArray<FieldSpec>>

/** The `.proto` file's package: message `Request` is `authordirectory.websocket.Request`. */
export const PROTO_PACKAGE = "authordirectory.websocket"

export interface RequestMessage {
  readonly pkg_id: number
  readonly req_id: string
  readonly method: string
  readonly data_json: string
}

export interface MetadataMessage {
  readonly page: number
  readonly per_page: number
  readonly total: number
  readonly pages: number
  /** "" when there is no next page. */
  readonly next_cursor: string
  readonly has_more: boolean
}

export interface ResponseMessage {
  readonly pkg_id: number
  readonly req_id: string
  readonly status_code: number
  readonly data_json: string
  /** null when absent. */
  readonly meta: MetadataMessage | null
}

export interface BroadcastMessage {
  readonly pkg_id: number
  readonly req_id: string
  readonly data_json: string
}

type MessageName = keyof typeof MESSAGES
type Value = number | string | boolean | Fields | null
type Fields = { readonly [name: string]: Value }

const VARINT = 0
const FIXED64 = 1
const LENGTH_DELIMITED = 2
const FIXED32 = 5

const utf8Encoder = new TextEncoder()
// `ignoreBOM`: a string that starts with U+FEFF is content in protobuf, not a byte-order mark to drop.
const utf8Decoder = new TextDecoder("utf-8", { ignoreBOM: true })

// --- encoding ----------------------------------------------------------------------------------

const writeUint32 = (out: Array<number>, value: number) => {
  let v = value >>> 0
  while (v > 0x7f) {
    out.push((v & 0x7f) | 0x80)
    v >>>= 7
  }
  out.push(v)
}

/** An int32 as protobuf writes it: a negative value is sign-extended to 64 bits (ten bytes). */
const writeInt32 = (out: Array<number>, value: number) => {
  if (value >= 0) return writeUint32(out, value)
  let low = value >>> 0
  for (let i = 0; i < 4; i++) {
    out.push((low & 0x7f) | 0x80)
    low >>>= 7
  }
  // The low word's last 4 bits, then the high word, all ones: 3 + 7·4 + 1 bits.
  out.push(low | 0xf0, 0xff, 0xff, 0xff, 0xff, 0x01)
}

const writeBytes = (out: Array<number>, bytes: Uint8Array) => {
  writeUint32(out, bytes.length)
  for (const byte of bytes) out.push(byte)
}

const encodeFields = (name: MessageName, message: Fields): Array<number> => {
  const out: Array<number> = []
  for (const field of MESSAGES[name]) {
    const value = message[field.name]
    switch (field.type) {
      case "int32": {
        const n = Number(value ?? 0) | 0
        if (n !== 0) {
          writeUint32(out, (field.id << 3) | VARINT)
          writeInt32(out, n)
        }
        break
      }
      case "bool":
        if (value === true) out.push((field.id << 3) | VARINT, 1)
        break
      case "string": {
        const text = String(value ?? "")
        if (text !== "") {
          writeUint32(out, (field.id << 3) | LENGTH_DELIMITED)
          writeBytes(out, utf8Encoder.encode(text))
        }
        break
      }
      case "Metadata":
        if (value !== null && value !== undefined && typeof value === "object") {
          writeUint32(out, (field.id << 3) | LENGTH_DELIMITED)
          writeBytes(out, Uint8Array.from(encodeFields(field.type, value)))
        }
        break
    }
  }
  return out
}

const encode = (name: MessageName, message: Fields): Uint8Array<ArrayBuffer> => Uint8Array.from(encodeFields(name, message))

// --- decoding ----------------------------------------------------------------------------------

/**
 * Bytes that are not a message of the schema (truncated, overlong, or of the wrong wire type). An
 * `Error` with a `_tag`, like the client kit's other errors (this module imports nothing).
 */
export class ProtobufDecodeError extends Error {
  readonly _tag = "ProtobufDecodeError"
  constructor(message: string) {
    super(message)
    this.name = "ProtobufDecodeError"
  }
}

interface Reader {
  readonly bytes: Uint8Array
  pos: number
  readonly end: number
}

/** A varint's low 32 bits (an int32 or uint32 is its low word); at most ten bytes. */
const readVarint32 = (r: Reader): number => {
  let result = 0
  for (let i = 0; i < 10; i++) {
    if (r.pos >= r.end) throw new ProtobufDecodeError("truncated varint")
    const byte = r.bytes[r.pos++]!
    if (i < 4) result |= (byte & 0x7f) << (7 * i)
    else if (i === 4) result |= (byte & 0x0f) << 28
    if ((byte & 0x80) === 0) return result
  }
  throw new ProtobufDecodeError("varint longer than ten bytes")
}

const readLength = (r: Reader): number => {
  const length = readVarint32(r) >>> 0
  if (length > r.end - r.pos) throw new ProtobufDecodeError("length beyond the end of the message")
  return length
}

const skip = (r: Reader, wireType: number) => {
  switch (wireType) {
    case VARINT:
      readVarint32(r)
      return
    case FIXED64:
    case FIXED32: {
      const size = wireType === FIXED64 ? 8 : 4
      if (size > r.end - r.pos) throw new ProtobufDecodeError("truncated fixed-size field")
      r.pos += size
      return
    }
    case LENGTH_DELIMITED: {
      // Read first: `r.pos += readLength(r)` would add to the position before the length.
      const length = readLength(r)
      r.pos += length
      return
    }
    default:
      throw new ProtobufDecodeError(`unsupported wire type ${wireType}`)
  }
}

const defaults = (name: MessageName): Record<string, Value> => {
  const message: Record<string, Value> = {}
  for (const field of MESSAGES[name]) {
    message[field.name] = field.type === "int32" ? 0 : field.type === "bool" ? false : field.type === "string" ? "" : null
  }
  return message
}

const decodeFields = (name: MessageName, r: Reader): Record<string, Value> => {
  const message = defaults(name)
  const specs: ReadonlyArray<FieldSpec> = MESSAGES[name]
  while (r.pos < r.end) {
    const tag = readVarint32(r) >>> 0
    const id = tag >>> 3
    const wireType = tag & 7
    const field = specs.find((f) => f.id === id)
    if (field === undefined) {
      skip(r, wireType)
      continue
    }
    const expected = field.type === "int32" || field.type === "bool" ? VARINT : LENGTH_DELIMITED
    if (wireType !== expected) throw new ProtobufDecodeError(`field ${field.name}: wire type ${wireType}, expected ${expected}`)
    switch (field.type) {
      case "int32":
        message[field.name] = readVarint32(r) | 0
        break
      case "bool":
        message[field.name] = readVarint32(r) !== 0
        break
      case "string": {
        const length = readLength(r)
        message[field.name] = utf8Decoder.decode(r.bytes.subarray(r.pos, r.pos + length))
        r.pos += length
        break
      }
      case "Metadata": {
        const length = readLength(r)
        message[field.name] = decodeFields(field.type, { bytes: r.bytes, pos: r.pos, end: r.pos + length })
        r.pos += length
        break
      }
    }
  }
  return message
}

const decode = (name: MessageName, bytes: Uint8Array): Record<string, Value> =>
  decodeFields(name, { bytes, pos: 0, end: bytes.length })

// --- the messages --------------------------------------------------------------------------------

export const encodeRequest = (message: RequestMessage): Uint8Array<ArrayBuffer> => encode("Request", { ...message })
export const decodeRequest = (bytes: Uint8Array): RequestMessage => decode("Request", bytes) as unknown as RequestMessage
export const encodeResponse = (message: ResponseMessage): Uint8Array<ArrayBuffer> =>
  encode("Response", { ...message, meta: message.meta === null ? null : { ...message.meta } })
export const decodeResponse = (bytes: Uint8Array): ResponseMessage => decode("Response", bytes) as unknown as ResponseMessage
export const encodeMetadata = (message: MetadataMessage): Uint8Array<ArrayBuffer> => encode("Metadata", { ...message })
export const decodeMetadata = (bytes: Uint8Array): MetadataMessage => decode("Metadata", bytes) as unknown as MetadataMessage
export const encodeBroadcast = (message: BroadcastMessage): Uint8Array<ArrayBuffer> => encode("Broadcast", { ...message })
export const decodeBroadcast = (bytes: Uint8Array): BroadcastMessage => decode("Broadcast", bytes) as unknown as BroadcastMessage
