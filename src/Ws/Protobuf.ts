/**
 * `?format=protobuf` (docs/websocket.md#protobuf): the messages of `proto/websocket.proto`, the very file
 * served at `GET /proto/websocket.proto`, compiled once by protobufjs.
 */
import { readFileSync } from "node:fs"
import protobuf from "protobufjs"
import type { PageMeta } from "../Domain/Pagination.ts"
import { classify, type Frame, InvalidJson } from "./Protocol.ts"

export const PROTO_TEXT = readFileSync(new URL("../../proto/websocket.proto", import.meta.url), "utf8")

const root = protobuf.parse(PROTO_TEXT, { keepCase: true }).root
/** The compiled messages, shared with the client (Client/Ws.ts). */
export const RequestType = root.lookupType("authordirectory.websocket.Request")
export const ResponseType = root.lookupType("authordirectory.websocket.Response")

interface DecodedRequest {
  readonly pkg_id: number
  readonly req_id: string
  readonly method: string
  readonly data_json: string
}

/**
 * A binary frame. Undecodable bytes, or a request without an integer pkg_id and a UUID req_id,
 * are unusable (close 1003); `data_json` that is not JSON is left for the envelope check, which
 * answers `status_code 2`.
 */
export const parseProtobufFrame = (bytes: Uint8Array): Frame => {
  let message: DecodedRequest
  try {
    message = RequestType.toObject(RequestType.decode(bytes), { defaults: true }) as DecodedRequest
  } catch {
    return { _tag: "Invalid" }
  }
  let data: unknown = {}
  if (message.data_json !== "") {
    try {
      data = JSON.parse(message.data_json)
    } catch {
      data = new InvalidJson(message.data_json)
    }
  }
  const frame = classify({ pkg_id: message.pkg_id, req_id: message.req_id, method: message.method, data })
  return frame._tag === "Auth" ? { _tag: "Invalid" } : frame
}

export interface ResponseFields {
  readonly pkg_id: number
  readonly req_id: string
  readonly status_code: number
  readonly data: unknown
  readonly meta: PageMeta | null
}

/**
 * The bytes of a Response with meta null up to the value of its `data_json` of `dataJsonBytes`
 * UTF-8 bytes: fields 1–3, then field 4's tag and length. Followed by exactly those bytes, it is
 * the message `encodeResponse` gives (fields are written in number order) — how a list too large
 * to hold is sent (Streaming.ts): the length of a length-delimited field comes before its bytes.
 */
export const encodeResponseHead = (pkgId: number, reqId: string, statusCode: number, dataJsonBytes: number): Uint8Array => {
  const writer = protobuf.Writer.create()
  ResponseType.encode(ResponseType.fromObject({ pkg_id: pkgId, req_id: reqId, status_code: statusCode }), writer)
  return writer.uint32((4 << 3) | 2).uint32(dataJsonBytes).finish()
}

/** A Response message; `meta` absent when null, `next_cursor` "" when null. */
export const encodeResponse = (response: ResponseFields): Uint8Array =>
  encodeResponseJson(response, JSON.stringify(response.data ?? null))

/** The same, with `data` already JSON (an answer of the read cache, Authors/ReadAnswers.ts). */
export const encodeResponseJson = (response: Omit<ResponseFields, "data">, dataJson: string): Uint8Array =>
  ResponseType.encode(ResponseType.fromObject({
    pkg_id: response.pkg_id,
    req_id: response.req_id,
    status_code: response.status_code,
    data_json: dataJson,
    ...(response.meta === null ? {} : { meta: { ...response.meta, next_cursor: response.meta.next_cursor ?? "" } })
  })).finish()
