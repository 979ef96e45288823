/**
 * The client kit's protobuf codec (src/Ws/ProtobufCodec.ts) is the schema of
 * `proto/websocket.proto`: its table names every message, field, number and type the file declares
 * (and nothing else), and on any message its bytes decode under protobufjs (compiled from the file,
 * as the server does) to the same values, protobufjs's bytes decode under it to the same values,
 * and its bytes are exactly protobufjs's for a message written without its default fields.
 */
import fc from "fast-check"
import { readFileSync } from "node:fs"
import protobuf from "protobufjs"
import { describe, expect, it } from "vitest"
import {
  decodeBroadcast,
  decodeMetadata,
  decodeRequest,
  decodeResponse,
  encodeBroadcast,
  encodeMetadata,
  encodeRequest,
  encodeResponse,
  MESSAGES,
  PROTO_PACKAGE,
  ProtobufDecodeError
} from "../../src/Ws/ProtobufCodec.ts"

const root = protobuf.parse(readFileSync("proto/websocket.proto", "utf8"), { keepCase: true }).root
const namespace = root.lookup(PROTO_PACKAGE) as protobuf.Namespace
const type = (name: string) => root.lookupType(`${PROTO_PACKAGE}.${name}`)

const int32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })
const text = fc.string({ unit: "binary", maxLength: 40 })
const metadata = fc.record({ page: int32, per_page: int32, total: int32, pages: int32, next_cursor: text, has_more: fc.boolean() })
const arbitraries = {
  Request: fc.record({ pkg_id: int32, req_id: text, method: text, data_json: text }),
  Metadata: metadata,
  Response: fc.record({ pkg_id: int32, req_id: text, status_code: int32, data_json: text, meta: fc.option(metadata, { nil: null }) }),
  Broadcast: fc.record({ pkg_id: int32, req_id: text, data_json: text })
}
const codecs = {
  Request: { encode: encodeRequest, decode: decodeRequest },
  Metadata: { encode: encodeMetadata, decode: decodeMetadata },
  Response: { encode: encodeResponse, decode: decodeResponse },
  Broadcast: { encode: encodeBroadcast, decode: decodeBroadcast }
} as const
type Name = keyof typeof codecs
const NAMES = Object.keys(codecs) as Array<Name>

/** protobufjs's reading of bytes, with proto3 defaults filled in and an absent message as null. */
const viaProtobufjs = (name: Name, bytes: Uint8Array) => type(name).toObject(type(name).decode(bytes), { defaults: true })

/** The message without its default-valued fields (what proto3 leaves off the wire). */
const withoutDefaults = (message: Record<string, unknown>): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(message)
      .filter(([, v]) => v !== 0 && v !== "" && v !== false && v !== null)
      .map(([k, v]) => [k, typeof v === "object" ? withoutDefaults(v as Record<string, unknown>) : v])
  )

describe("the protobuf codec", () => {
  it("declares exactly the messages and fields of proto/websocket.proto", () => {
    const declared = Object.fromEntries(
      Object.values(namespace.nested ?? {})
        .filter((n): n is protobuf.Type => n instanceof protobuf.Type)
        .map((t) => [t.name, t.fieldsArray.map((f) => ({ name: f.name, id: f.id, type: f.type, repeated: f.repeated, map: f.map }))])
    )
    const table = Object.fromEntries(
      Object.entries(MESSAGES).map(([name, fields]) => [name, fields.map((f) => ({ ...f, repeated: false, map: false }))])
    )
    expect(table).toEqual(declared)
  })

  it.each(NAMES)("%s: its bytes read back the same under protobufjs, and protobufjs's under it", (name) => {
    fc.assert(
      fc.property(arbitraries[name], (message) => {
        const ours = (codecs[name].encode as (m: typeof message) => Uint8Array)(message)
        expect(viaProtobufjs(name, ours)).toEqual(message)
        const theirs = type(name).encode(type(name).fromObject(message)).finish()
        expect(codecs[name].decode(theirs)).toEqual(message)
        expect(codecs[name].decode(ours)).toEqual(message)
        // Canonical proto3: the same bytes as protobufjs writing only the non-default fields.
        expect([...ours]).toEqual([...type(name).encode(type(name).fromObject(withoutDefaults(message))).finish()])
      }),
      { numRuns: 300 }
    )
  })

  it("keeps a string that starts with U+FEFF: in protobuf it is content, not a byte-order mark", () => {
    const message = { pkg_id: 1, req_id: "\ufeffr", method: "", data_json: "\ufeff{}" }
    expect(decodeRequest(encodeRequest(message))).toEqual(message)
    expect(decodeRequest(type("Request").encode(type("Request").fromObject(message)).finish())).toEqual(message)
  })

  it("writes a negative int32 as ten bytes, as protobufjs does", () => {
    const bytes = encodeRequest({ pkg_id: -1, req_id: "", method: "", data_json: "" })
    expect(bytes.length).toBe(11)
    expect(decodeRequest(bytes).pkg_id).toBe(-1)
    expect([...bytes]).toEqual([...type("Request").encode({ pkg_id: -1 }).finish()])
  })

  it("skips fields it does not know, of every wire type", () => {
    const writer = protobuf.Writer.create()
    writer.uint32((9 << 3) | 0).uint32(300)
    writer.uint32((10 << 3) | 1).fixed64(7)
    writer.uint32((11 << 3) | 2).string("unknown")
    writer.uint32((12 << 3) | 5).fixed32(7)
    writer.uint32((1 << 3) | 0).int32(4)
    expect(decodeRequest(writer.finish())).toEqual({ pkg_id: 4, req_id: "", method: "", data_json: "" })
  })

  it("refuses bytes that are not a message: truncated, beyond the end, or of the wrong wire type", () => {
    const whole = encodeResponse({ pkg_id: 2, req_id: "abc", status_code: 0, data_json: "[]", meta: null })
    for (let cut = 1; cut < whole.length; cut++) {
      // Every proper prefix that ends inside a field is refused (a prefix ending between fields is a shorter message).
      const prefix = whole.subarray(0, cut)
      let ours: unknown
      try {
        ours = decodeResponse(prefix)
      } catch (error) {
        ours = error
      }
      let theirs: unknown
      try {
        theirs = viaProtobufjs("Response", prefix)
      } catch (error) {
        theirs = error
      }
      expect(ours instanceof ProtobufDecodeError, `prefix of ${cut} bytes`).toBe(theirs instanceof Error)
    }
    expect(() => decodeRequest(Uint8Array.of((1 << 3) | 2, 1, 0))).toThrow(ProtobufDecodeError)
    expect(() => decodeRequest(Uint8Array.of((1 << 3) | 2, 1, 0))).toThrow(expect.objectContaining({ _tag: "ProtobufDecodeError", name: "ProtobufDecodeError" }))
    expect(() => decodeRequest(Uint8Array.of(0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))).toThrow(ProtobufDecodeError)
  })
})
