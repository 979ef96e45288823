/**
 * Reliability faults, property-based, WebSocket `/web` (docs/websocket.md): more than 10,000
 * generated frames per run over eight connections — JSON and protobuf formats, tokens in the query,
 * in a header or in a first auth frame, users with and without the packages' roles. Frames: valid
 * packages 1/2/3 with hostile data (NUL, unpaired surrogates, control characters, huge numbers,
 * wrong types, deep nesting), unusable envelopes, text that is not JSON, binary frames in JSON
 * mode, random and truncated protobuf, invalid UTF-8, frames at and over WS_MAX_MESSAGE_BYTES,
 * re-auth frames with good and bad tokens.
 *
 * Each frame is followed by a probe (package 1 with `filters.id = -1`); a connection handles its
 * frames in order, so the frame's own outcome arrives first. Properties: a frame with an integer
 * pkg_id and a UUID req_id is answered with a valid Response carrying them; every other frame
 * closes the connection with its documented code (1003 unusable, 1009 too big, 4001 bad re-auth;
 * 1007 for text that is not UTF-8, RFC 6455 §8.1); no reply is `status_code 1` (in particular
 * never "Database error occurred" for a client mistake); the server never closes 1011; every
 * server frame is a valid Response, a broadcast or `auth_ok`. A closed connection is replaced.
 * Afterwards the audit trail still advances.
 */
import fc from "fast-check"
import { isUtf8 } from "node:buffer"
import { randomUUID } from "node:crypto"
import protobuf from "protobufjs"
import WebSocket from "ws"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { awaitAuditRecord } from "../support/AuditTrail.ts"
import { request, signToken, startTestApp, type TestApp } from "../support/TestApp.ts"
import { Mailbox, ZERO_REQ_ID } from "../support/WsClient.ts"

const FRAMES = 10_000
const PER_LANE = 4
const WS_MAX = 65_536
/** Liveness guard only (no frame legitimately takes this long); not a performance threshold. */
const HANG_MS = 20_000
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
const ADMIN_ROLES = ["admin", "user", "get-authors", "create-author", "update-author", "delete-author"]

type Format = "json" | "protobuf"
type AuthMode = "query Authorization" | "query token" | "query access_token" | "header" | "auth frame"

interface LaneSpec {
  readonly format: Format
  readonly auth: AuthMode
  readonly roles: ReadonlyArray<string>
}

const LANES: ReadonlyArray<LaneSpec> = [
  { format: "json", auth: "query Authorization", roles: ["get-authors", "create-author"] },
  { format: "json", auth: "query token", roles: ["get-authors"] },
  { format: "json", auth: "auth frame", roles: ["get-authors", "create-author"] },
  { format: "json", auth: "header", roles: [] },
  { format: "json", auth: "query Authorization", roles: ["get-authors", "create-author"] },
  { format: "protobuf", auth: "query access_token", roles: ["get-authors", "create-author"] },
  { format: "protobuf", auth: "query Authorization", roles: ["get-authors"] },
  { format: "protobuf", auth: "auth frame", roles: ["get-authors", "create-author"] }
]
const JSON_LANES = LANES.filter((l) => l.format === "json").length
const PROTO_LANES = LANES.length - JSON_LANES

let app: TestApp
let admin: string
let laneTokens: Array<string> = []
let cursor = ""
let RequestType: protobuf.Type
let ResponseType: protobuf.Type

// ---------------------------------------------------------------------------------------------
// Frames and what the contract says must follow each

/** What a frame must get: an answer (the Response of its pkg_id and req_id), a close, or a re-auth outcome. */
type Expect =
  | { readonly _tag: "answer"; readonly pkgId: number; readonly reqId: string }
  | { readonly _tag: "close"; readonly code: number; readonly reason?: string }
  /** A re-auth frame: `auth_ok` when `ok`, else close 4001. */
  | { readonly _tag: "auth"; readonly ok: boolean }

interface Frame {
  /** Which generator made it, for the failure message. */
  readonly kind: string
  readonly payload: string | Uint8Array
  readonly binary: boolean
}

const clip = (s: string, n = 240) => (s.length > n ? `${s.slice(0, n)}…(${s.length} chars)` : s)
const describeFrame = (f: Frame) =>
  `[${f.kind}] ${f.binary ? "binary" : "text"} ${f.payload.length} ${typeof f.payload === "string" ? "chars" : "bytes"}: ` +
  clip(typeof f.payload === "string" ? JSON.stringify(f.payload) : Buffer.from(f.payload).toString("hex"))
const frame = (kind: string, payload: string | Uint8Array, binary = typeof payload !== "string"): Frame =>
  Object.assign({ kind, payload, binary }, { [fc.toStringMethod]: () => describeFrame({ kind, payload, binary }) })

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** The frame rules of docs/websocket.md (messages, protobuf, auth frames), applied to one frame of a lane. */
const expectationOf = (f: Frame, format: Format, laneToken: string): Expect => {
  const bytes = typeof f.payload === "string" ? Buffer.from(f.payload, "utf8") : Buffer.from(f.payload)
  if (bytes.length > WS_MAX) return { _tag: "close", code: 1009 }
  if (!f.binary && !isUtf8(bytes)) return { _tag: "close", code: 1007 }
  const unusable: Expect = { _tag: "close", code: 1003, reason: "Invalid message format" }
  const usable = (value: Record<string, unknown>): Expect =>
    typeof value["pkg_id"] === "number" && Number.isSafeInteger(value["pkg_id"]) && typeof value["req_id"] === "string" && UUID.test(value["req_id"])
      ? { _tag: "answer", pkgId: value["pkg_id"], reqId: value["req_id"] }
      : unusable
  if (f.binary) {
    if (format === "json") return unusable
    try {
      const m = RequestType.toObject(RequestType.decode(bytes), { defaults: true })
      return usable({ pkg_id: m["pkg_id"], req_id: m["req_id"] })
    } catch {
      return unusable
    }
  }
  let value: unknown
  try {
    value = JSON.parse(bytes.toString("utf8"))
  } catch {
    return unusable
  }
  if (!isRecord(value)) return unusable
  if (value["type"] === "auth") {
    const token = value["token"]
    return { _tag: "auth", ok: token === laneToken || token === `Bearer ${laneToken}` }
  }
  return format === "protobuf" ? unusable : usable(value)
}

// ---------------------------------------------------------------------------------------------
// A client that checks every server frame

type Event =
  | { readonly _tag: "reply"; readonly pkgId: number; readonly reqId: string; readonly status: number; readonly data: unknown; readonly meta: unknown }
  | { readonly _tag: "auth_ok" }
  | { readonly _tag: "malformed"; readonly what: string }
  | { readonly _tag: "close"; readonly code: number; readonly reason: string }

const figures = {
  fuzzFrames: 0,
  probes: 0,
  connections: 0,
  replies: new Map<string, number>(),
  closes: new Map<string, number>(),
  authOk: 0,
  broadcasts: 0,
  started: 0,
  auditProbeMs: -1
}
const bump = (m: Map<string, number>, k: string | number) => m.set(String(k), (m.get(String(k)) ?? 0) + 1)

/** A server→client envelope as an event: a Response, or `malformed` saying what is wrong with it. */
const toEvent = (value: unknown): Event => {
  if (!isRecord(value)) return { _tag: "malformed", what: `not an object: ${clip(JSON.stringify(value))}` }
  if (value["type"] === "auth_ok" && Object.keys(value).length === 1) return { _tag: "auth_ok" }
  const { pkg_id, req_id, status_code, data, meta } = value
  const bad = (why: string): Event => ({ _tag: "malformed", what: `${why}: ${clip(JSON.stringify(value))}` })
  if (typeof pkg_id !== "number" || !Number.isSafeInteger(pkg_id)) return bad("pkg_id is not an integer")
  if (typeof req_id !== "string" || !UUID.test(req_id)) return bad("req_id is not a UUID")
  if (status_code !== 0 && status_code !== 1 && status_code !== 2 && status_code !== 3) return bad("status_code is not 0–3")
  if (!("data" in value)) return bad("no data")
  if (meta !== null && meta !== undefined && !(isRecord(meta) && typeof meta["total"] === "number")) return bad("meta is neither null nor pagination meta")
  if (status_code !== 0 && !(isRecord(data) && typeof data["msg"] === "string")) return bad("an error without data.msg")
  return { _tag: "reply", pkgId: pkg_id, reqId: req_id, status: status_code, data, meta: meta ?? null }
}

interface Conn {
  readonly ws: WebSocket
  readonly events: Mailbox<Event>
  readonly opened: Promise<void>
}

const connect = (spec: LaneSpec, token: string): Conn => {
  const url = new URL(`${app.wsUrl}/web`)
  if (spec.format === "protobuf") url.searchParams.set("format", "protobuf")
  if (spec.auth === "query Authorization") url.searchParams.set("Authorization", `Bearer ${token}`)
  if (spec.auth === "query token") url.searchParams.set("token", token)
  if (spec.auth === "query access_token") url.searchParams.set("access_token", `Bearer ${token}`)
  const ws = new WebSocket(url, { headers: spec.auth === "header" ? { authorization: `Bearer ${token}` } : {} })
  figures.connections++
  const events = new Mailbox<Event>()
  const opened = new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve())
    ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)))
    ws.once("error", reject)
  })
  opened.catch(() => {})
  ws.on("error", () => {})
  ws.on("close", (code, reason) => {
    bump(figures.closes, code)
    events.put({ _tag: "close", code, reason: reason.toString() })
  })
  ws.on("message", (data: Buffer, isBinary: boolean) => {
    let event: Event
    if (isBinary !== (spec.format === "protobuf")) {
      // Protobuf connections get binary Responses (auth_ok stays JSON text); JSON connections only text.
      let text: unknown
      try {
        text = isBinary ? undefined : JSON.parse(data.toString("utf8"))
      } catch {
        text = undefined
      }
      event = isRecord(text) && text["type"] === "auth_ok"
        ? { _tag: "auth_ok" }
        : { _tag: "malformed", what: `a ${isBinary ? "binary" : "text"} frame on a ${spec.format} connection: ${clip(data.toString("hex"))}` }
    } else if (isBinary) {
      try {
        const m = ResponseType.toObject(ResponseType.decode(data), { defaults: false }) as Record<string, unknown>
        event = toEvent({
          pkg_id: m["pkg_id"] ?? 0,
          req_id: m["req_id"] ?? "",
          status_code: m["status_code"] ?? 0,
          data: m["data_json"] === undefined ? null : JSON.parse(String(m["data_json"])),
          meta: m["meta"] ?? null
        })
      } catch (e) {
        event = { _tag: "malformed", what: `an undecodable protobuf Response (${String(e)}): ${clip(data.toString("hex"))}` }
      }
    } else {
      try {
        event = toEvent(JSON.parse(data.toString("utf8")))
      } catch {
        event = { _tag: "malformed", what: `a text frame that is not JSON: ${clip(data.toString("utf8"))}` }
      }
    }
    if (event._tag === "reply" && event.reqId === ZERO_REQ_ID) {
      // A broadcast (docs/websocket.md#broadcasts): pkg_id 0, status 0, an author event.
      const d = event.data
      if (event.pkgId === 0 && event.status === 0 && isRecord(d) && typeof d["event"] === "string" && isRecord(d["author"])) figures.broadcasts++
      else events.put({ _tag: "malformed", what: `a malformed broadcast: ${clip(JSON.stringify(d))}` })
      return
    }
    events.put(event)
  })
  return { ws, events, opened }
}

/** The next event, or a failure naming what was awaited if none comes (a hang is a finding too). */
const next = async (conn: Conn, awaiting: string): Promise<Event> => {
  let timer: NodeJS.Timeout | undefined
  const hang = new Promise<Event>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no reply and no close within ${HANG_MS / 1000} s, awaiting ${awaiting}`)), HANG_MS)
  })
  try {
    return await Promise.race([conn.events.take(), hang])
  } finally {
    clearTimeout(timer)
  }
}

const describeEvent = (e: Event) =>
  e._tag === "reply"
    ? `reply pkg_id=${e.pkgId} req_id=${e.reqId} status_code=${e.status} data=${clip(JSON.stringify(e.data))}`
    : e._tag === "close"
    ? `close ${e.code} ${JSON.stringify(e.reason)}`
    : e._tag === "malformed"
    ? `malformed server frame: ${e.what}`
    : "auth_ok"

class Violation extends Error {}

/** One connection slot: its user, token and current connection (replaced when the server closes it). */
class Lane {
  private conn: Conn | undefined
  readonly spec: LaneSpec
  readonly token: string
  readonly name: string

  constructor(spec: LaneSpec, token: string, index: number) {
    this.spec = spec
    this.token = token
    this.name = `lane ${index} (${spec.format}, ${spec.auth}, roles [${spec.roles.join(", ")}])`
  }

  private fail(what: string): never {
    throw new Violation(`${this.name}: ${what}`)
  }

  /** The open connection, replacing a closed one: it must be admitted again (no slot leaked). */
  private async ready(): Promise<Conn> {
    if (this.conn !== undefined) return this.conn
    const conn = connect(this.spec, this.token)
    await conn.opened.catch((e: unknown) => this.fail(`a new connection was refused: ${String(e)}`))
    if (this.spec.auth === "auth frame") {
      conn.ws.send(JSON.stringify({ type: "auth", token: `Bearer ${this.token}` }))
      const e = await next(conn, "auth_ok for the first auth frame")
      if (e._tag !== "auth_ok") this.fail(`the first auth frame was answered with ${describeEvent(e)}`)
    }
    this.conn = conn
    return conn
  }

  private probe(conn: Conn) {
    const reqId = randomUUID()
    const data = { filters: { id: -1 } }
    conn.ws.send(this.spec.format === "json"
      ? JSON.stringify({ pkg_id: 1, req_id: reqId, data })
      : RequestType.encode(RequestType.fromObject({ pkg_id: 1, req_id: reqId, method: "", data_json: JSON.stringify(data) })).finish())
    figures.probes++
    return reqId
  }

  /** Sends the frame and a probe; checks the frame's outcome, then the probe's answer. */
  async check(f: Frame) {
    const conn = await this.ready()
    const expected = expectationOf(f, this.spec.format, this.token)
    const context = () => `\n  frame:    ${describeFrame(f)}\n  expected: ${JSON.stringify(expected)}`
    conn.ws.send(f.payload, { binary: f.binary })
    figures.fuzzFrames++
    const probeId = this.probe(conn)

    const outcome = await next(conn, `the outcome of ${describeFrame(f)}`)
    if (outcome._tag === "malformed") this.fail(`${describeEvent(outcome)}${context()}`)
    if (outcome._tag === "close") {
      this.conn = undefined
      if (outcome.code === 1011) this.fail(`closed 1011 (internal error)${context()}`)
      const ok = expected._tag === "close"
        ? outcome.code === expected.code && (expected.reason === undefined || outcome.reason === expected.reason)
        : expected._tag === "auth" && !expected.ok && outcome.code === 4001
      if (!ok) this.fail(`${describeEvent(outcome)}${context()}`)
      return
    }
    if (outcome._tag === "auth_ok") {
      figures.authOk++
      if (!(expected._tag === "auth" && expected.ok)) this.fail(`auth_ok${context()}`)
    } else {
      bump(figures.replies, outcome.status)
      if (expected._tag !== "answer") this.fail(`${describeEvent(outcome)}${context()}`)
      if (outcome.reqId !== expected.reqId || outcome.pkgId !== expected.pkgId) this.fail(`the reply does not carry the frame's pkg_id and req_id: ${describeEvent(outcome)}${context()}`)
      if (outcome.status === 1) {
        const msg = (outcome.data as { msg: string }).msg
        if (msg !== "Rate limit exceeded") this.fail(`status_code 1 "${msg}" for a client's frame${context()}`)
      }
      if (outcome.status === 0) {
        const pkg3 = expected.pkgId === 3
        if (pkg3 ? !(isRecord(outcome.data) && typeof outcome.data["id"] === "number") : !Array.isArray(outcome.data)) {
          this.fail(`a success whose data is not ${pkg3 ? "an author" : "a list"}: ${describeEvent(outcome)}${context()}`)
        }
      }
    }

    const answer = await next(conn, "the probe's answer")
    if (answer._tag === "close") this.conn = undefined
    const probeOk = answer._tag === "reply" && answer.reqId === probeId &&
      answer.status === (this.spec.roles.includes("get-authors") ? 0 : 3)
    if (!probeOk) this.fail(`the probe after the frame got ${describeEvent(answer)}${context()}`)
    if (answer._tag === "reply") bump(figures.replies, answer.status)
  }

  async close() {
    const conn = this.conn
    this.conn = undefined
    if (conn === undefined || conn.ws.readyState === WebSocket.CLOSED) return
    const closed = new Promise<void>((resolve) => conn.ws.once("close", () => resolve()))
    conn.ws.close(1000)
    await closed
  }
}

// ---------------------------------------------------------------------------------------------
// Generators

const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c))
const controlChar = fc.oneof(fc.integer({ min: 0, max: 0x1f }), fc.constant(0x7f)).map((c) => String.fromCharCode(c))

const SPECIAL_STRINGS = [
  "", " ", " \t ", "\u0000", "a\u0000b", "\ud800", "\udfff", "a\ud800b", "\udc00\ud800", "😀", "\u202e", "\ufeff", "\uffff",
  "\r\n", "\u001b[31m", "\u007f", "%", "_", "%_%", "\\", "' OR 1=1 --", "'; DROP TABLE authors; --", "null", "NaN", "1e400",
  "Fuzz Seed 0", "  Fuzz Seed 1  ", "FUZZ SEED 2"
]
const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...SPECIAL_STRINGS) },
  { weight: 6, arbitrary: fc.string({ maxLength: 24 }) },
  { weight: 3, arbitrary: fc.string({ unit: "binary", maxLength: 24 }) },
  { weight: 2, arbitrary: fc.string({ unit: controlChar, minLength: 1, maxLength: 8 }) },
  { weight: 2, arbitrary: fc.tuple(fc.string({ maxLength: 6 }), loneSurrogate, fc.string({ maxLength: 6 })).map((t) => t.join("")) },
  { weight: 1, arbitrary: fc.integer({ min: 250, max: 260 }).map((n) => "n".repeat(n)) },
  { weight: 1, arbitrary: fc.constantFrom(2_000, 20_000).map((n) => "雨".repeat(n)) }
)
const NUMBERS = [0, -1, 1.5, -0, 2 ** 31, -(2 ** 31) - 1, 2 ** 53 + 1, 2 ** 63, -(2 ** 63), 1e308, -1e308, Number.MIN_VALUE]
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: hostileString },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: fc.constantFrom<unknown>(null, true, false, [], {}, [1], { id: 1 }, ...NUMBERS) },
  { weight: 1, arbitrary: fc.bigInt().map((n) => Number(n)) }
)

const deepText = (depth: number, object: boolean) => (object ? `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}` : `${"[".repeat(depth)}1${"]".repeat(depth)}`)
const DEPTHS = [65, 200, 5_000]

const data = () => {
  const filters = fc.oneof(
    { weight: 1, arbitrary: hostileValue },
    {
      weight: 4,
      arbitrary: fc.record({
        id: fc.oneof(fc.integer({ min: -2, max: 60 }), hostileValue),
        name: fc.oneof(hostileString, hostileValue),
        search_term: fc.oneof(hostileString, hostileValue),
        extra: hostileValue
      }, { requiredKeys: [] })
    }
  )
  const cursors = fc.oneof(
    fc.constantFrom(cursor, cursor.slice(0, -2), `${cursor}A`, cursor.toUpperCase(), cursor.split("").reverse().join("")),
    hostileString
  )
  const pkg1 = fc.record({ filters }, { requiredKeys: [] })
  const pkg2 = fc.record({
    page: fc.oneof(fc.integer({ min: 1, max: 5 }), hostileValue),
    per_page: fc.oneof(fc.constantFrom(1, 10, 1000, 1001), hostileValue),
    filters,
    cursor: fc.oneof(cursors, hostileValue)
  }, { requiredKeys: [] })
  const pkg3 = fc.record({
    name: fc.oneof(
      fc.constantFrom(...Array.from({ length: 20 }, (_, i) => `Fuzz Seed ${i}`)),
      fc.string({ minLength: 1, maxLength: 30 }).map((s) => `WS ${s}`),
      hostileString,
      hostileValue
    )
  }, { requiredKeys: [] })
  return { pkg1, pkg2, pkg3 }
}

const uuid = fc.uuid().map((u) => (u === ZERO_REQ_ID ? randomUUID() : u))
const PKG_IDS = [1, 2, 3]
const ODD_PKG_IDS = [0, 4, -1, 99, 2 ** 31 - 1, -(2 ** 31)]

/** JSON text frames (JSON connections; on protobuf connections only auth frames are usable). */
const jsonFrames = (tokens: { own: string; other: string }) => {
  const d = data()
  const envelope = fc.oneof(
    fc.tuple(fc.constant(1), d.pkg1),
    fc.tuple(fc.constant(2), d.pkg2),
    fc.tuple(fc.constant(3), d.pkg3),
    fc.tuple(fc.constantFrom(...PKG_IDS, ...ODD_PKG_IDS), hostileValue)
  )
  const usable = fc.record({
    pd: envelope,
    reqId: fc.oneof({ weight: 9, arbitrary: uuid }, { weight: 1, arbitrary: uuid.map((u) => u.toUpperCase()) }),
    method: fc.option(fc.oneof(fc.constantFrom("GET_AUTHORS", "GET_PAGINATED_AUTHORS", "CREATE_AUTHOR", ""), hostileValue), { nil: undefined }),
    extra: fc.option(hostileValue, { nil: undefined })
  }).map(({ pd: [pkgId, data], reqId, method, extra }) =>
    frame("usable envelope", JSON.stringify({ pkg_id: pkgId, req_id: reqId, data, ...(method !== undefined ? { method } : {}), ...(extra !== undefined ? { extra } : {}) })))
  const nested = fc.record({ pkgId: fc.constantFrom(...PKG_IDS), reqId: uuid, depth: fc.constantFrom(...DEPTHS), object: fc.boolean(), where: fc.constantFrom("data", "filters", "name") })
    .map(({ pkgId, reqId, depth, object, where }) => {
      const deep = deepText(depth, object)
      const dataText = where === "data" ? deep : where === "filters" ? `{"filters":${deep}}` : `{"name":${deep}}`
      return frame("deeply nested data", `{"pkg_id":${pkgId},"req_id":"${reqId}","data":${dataText}}`)
    })
  const rawEscapes = fc.tuple(fc.constantFrom(...PKG_IDS), uuid, fc.constantFrom(
    '{"name":"\\u0000"}', '{"name":"a\\ud800b"}', '{"name":"\\udfff"}', '{"filters":{"name":"\\u0000"}}', '{"filters":{"search_term":"\\ud800"}}',
    '{"filters":{"id":1e400}}', '{"filters":{"id":-1e400}}', `{"filters":{"id":${"9".repeat(400)}}}`, '{"page":1e400,"per_page":1}',
    '{"page":1,"per_page":-1e400}', '{"page":1,"per_page":10,"cursor":"\\u0000"}', '{"page":1,"per_page":10,"cursor":"\\ud800"}',
    '{"name":"x","name":"y"}', '{"__proto__":{"name":"x"}}', '{"constructor":{"prototype":{"page":1}}}'
  )).map(([pkgId, reqId, dataText]) => frame("escapes in data", `{"pkg_id":${pkgId},"req_id":"${reqId}","data":${dataText}}`))
  const unusable = fc.record({
    pkg_id: fc.oneof(fc.constantFrom<unknown>("1", 1.5, 1e308, 2 ** 53, null, true, [], {}, -0.5), fc.constantFrom(...PKG_IDS)),
    req_id: fc.oneof(
      fc.constantFrom<unknown>("", "not-a-uuid", "00000000-0000-0000-0000-00000000000g", "{00000000-0000-0000-0000-000000000001}", 1, null, [], {}),
      uuid.map((u) => `${u}x`),
      uuid.map((u) => `${u.slice(0, 8)}\u0000${u.slice(9)}`),
      uuid.map((u) => u.replaceAll("-", "")),
      uuid
    ),
    data: hostileValue
  }, { requiredKeys: [] }).map((v) => frame("envelope maybe unusable", JSON.stringify(v)))
  const notObject = fc.oneof(
    fc.jsonValue({ maxDepth: 2 }).filter((v) => !isRecord(v)).map((v) => JSON.stringify(v)),
    fc.constantFrom("[]", "1", '"s"', "null", "true", `[{"pkg_id":1,"req_id":"${randomUUID()}"}]`),
    fc.constantFrom(...DEPTHS).map((d) => deepText(d, false))
  ).map((t) => frame("JSON that is not an object", t))
  const notJson = fc.oneof(
    hostileString.filter((s) => { try { JSON.parse(s); return false } catch { return true } }),
    fc.constantFrom("{", "", "\u0000", `{"pkg_id":1,`, `{"pkg_id":1,"req_id":"${randomUUID()}"`, "{'pkg_id':1}", `{"pkg_id":1,"req_id":"${randomUUID()}","data":{"name":"a\u0000b"}}`)
  ).map((t) => frame("text that is not JSON", t))
  const auth = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(`Bearer ${tokens.own}`, tokens.own).map((t) => JSON.stringify({ type: "auth", token: t })) },
    { weight: 1, arbitrary: fc.constantFrom<unknown>(`Bearer ${tokens.other}`, "garbage", "Bearer a.b.c", 1, null, undefined, "", `Basic ${tokens.own}`).map((t) => JSON.stringify({ type: "auth", token: t })) }
  ).map((t) => frame("auth frame", t))
  const sized = fc.tuple(uuid, fc.integer({ min: -3, max: 3 }), fc.boolean()).map(([reqId, delta, big]) => {
    const head = `{"pkg_id":1,"req_id":"${reqId}","data":{"filters":{"name":"`
    const tail = '"}}}'
    const size = (big ? WS_MAX + 1 + Math.abs(delta) * 1000 : WS_MAX) + delta
    return frame(`a frame of ${size} bytes`, `${head}${"x".repeat(Math.max(0, size - head.length - tail.length))}${tail}`)
  })
  const binary = fc.oneof(
    fc.uint8Array({ maxLength: 200 }).map((a) => frame("a binary frame in json format", a)),
    uuid.map((reqId) => frame("a valid envelope as a binary frame", Buffer.from(JSON.stringify({ pkg_id: 1, req_id: reqId, data: {} })))),
    fc.constantFrom(WS_MAX + 1, WS_MAX + 5_000).map((n) => frame("an oversized binary frame", new Uint8Array(n)))
  )
  const badUtf8 = fc.tuple(uuid, fc.constantFrom([0xff], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0x80], [0xf4, 0x90, 0x80, 0x80]))
    .map(([reqId, bytes]) => frame("text that is not UTF-8", Buffer.concat([Buffer.from(`{"pkg_id":1,"req_id":"${reqId}","data":{"filters":{"name":"`), Buffer.from(bytes), Buffer.from('"}}}')]), false))
  return fc.oneof(
    { weight: 40, arbitrary: usable },
    { weight: 4, arbitrary: nested },
    { weight: 6, arbitrary: rawEscapes },
    { weight: 6, arbitrary: unusable },
    { weight: 2, arbitrary: notObject },
    { weight: 2, arbitrary: notJson },
    { weight: 2, arbitrary: auth },
    { weight: 2, arbitrary: sized },
    { weight: 2, arbitrary: binary },
    { weight: 1, arbitrary: badUtf8 }
  )
}

const encodeRequest = (pkgId: number, reqId: string, dataJson: string, method = "") =>
  RequestType.encode(RequestType.fromObject({ pkg_id: pkgId, req_id: reqId, method, data_json: dataJson })).finish()

/** Binary frames for protobuf connections, plus text frames (only auth frames are usable there). */
const protoFrames = (tokens: { own: string; other: string }) => {
  const d = data()
  const dataJson = fc.oneof(
    { weight: 6, arbitrary: fc.oneof(d.pkg1, d.pkg2, d.pkg3).map((v) => JSON.stringify(v)) },
    { weight: 2, arbitrary: hostileValue.map((v) => JSON.stringify(v) ?? "") },
    { weight: 2, arbitrary: hostileString },
    { weight: 1, arbitrary: fc.constantFrom("", "null", "[]", '{"name":"\\u0000"}', '{"filters":{"search_term":"\\ud800"}}', ...DEPTHS.map((n) => deepText(n, true))) }
  )
  const request = fc.record({
    pkgId: fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...PKG_IDS) }, { weight: 1, arbitrary: fc.constantFrom(...ODD_PKG_IDS) }),
    reqId: fc.oneof({ weight: 9, arbitrary: uuid }, { weight: 1, arbitrary: fc.oneof(hostileString, uuid.map((u) => `${u} `)) }),
    dataJson,
    method: fc.oneof(fc.constant(""), hostileString)
  }).map(({ pkgId, reqId, dataJson, method }) => frame("protobuf Request", encodeRequest(pkgId, reqId, dataJson, method)))
  const truncated = fc.tuple(fc.constantFrom(...PKG_IDS), uuid, fc.nat()).map(([pkgId, reqId, cut]) => {
    const full = encodeRequest(pkgId, reqId, JSON.stringify({ page: 1, per_page: 1 }))
    return frame("a truncated protobuf Request", full.subarray(0, cut % full.length))
  })
  const random = fc.uint8Array({ maxLength: 300 }).map((a) => frame("random bytes", a))
  const oversized = fc.tuple(uuid, fc.integer({ min: -2, max: 2 }), fc.boolean()).map(([reqId, delta, big]) => {
    const size = (big ? WS_MAX + 1000 : WS_MAX) + delta
    const bare = encodeRequest(1, reqId, "").length
    // data_json's length prefix grows by a byte or two: aim a little short and pad to the size.
    let bytes = encodeRequest(1, reqId, `{"filters":{"name":"${"x".repeat(Math.max(0, size - bare - 30))}"}}`)
    const missing = size - bytes.length
    if (missing > 0) bytes = encodeRequest(1, reqId, `{"filters":{"name":"${"x".repeat(Math.max(0, size - bare - 30) + missing)}"}}`)
    return frame(`a protobuf frame of ${bytes.length} bytes`, bytes)
  })
  const text = fc.oneof(
    fc.constantFrom(`Bearer ${tokens.own}`, tokens.own).map((t) => frame("auth frame", JSON.stringify({ type: "auth", token: t }))),
    fc.constantFrom<unknown>(`Bearer ${tokens.other}`, "garbage", 1, null).map((t) => frame("auth frame", JSON.stringify({ type: "auth", token: t }))),
    uuid.map((reqId) => frame("a JSON envelope on a protobuf connection", JSON.stringify({ pkg_id: 1, req_id: reqId, data: {} }))),
    hostileString.map((s) => frame("text on a protobuf connection", s))
  )
  return fc.oneof(
    { weight: 40, arbitrary: request },
    { weight: 5, arbitrary: truncated },
    { weight: 5, arbitrary: random },
    { weight: 2, arbitrary: oversized },
    { weight: 3, arbitrary: text }
  )
}

// ---------------------------------------------------------------------------------------------

let lanes: Array<Lane> = []

beforeAll(async () => {
  app = await startTestApp({
    config: { rateLimitEnabled: false, wsMessageRateLimit: 1_000_000, wsMaxMessageBytes: WS_MAX, wsMaxConnectionsPerUser: 5 }
  })
  admin = await signToken(app, { sub: "00000000-0000-4000-8000-000000000001", preferred_username: "admin", roles: ADMIN_ROLES }, { expiresIn: "30m" })
  const protoText = await (await fetch(`${app.url}/proto/websocket.proto`)).text()
  const root = protobuf.parse(protoText, { keepCase: true }).root
  RequestType = root.lookupType("authordirectory.websocket.Request")
  ResponseType = root.lookupType("authordirectory.websocket.Response")
  laneTokens = await Promise.all(LANES.map((spec, i) => signToken(app, { sub: `ws-fuzz-lane-${i}`, roles: [...spec.roles] }, { expiresIn: "30m" })))
  lanes = LANES.map((spec, i) => new Lane(spec, laneTokens[i]!, i))
  for (let i = 0; i < 3; i++) expect((await request(app, "POST", "/authors", { token: admin, body: { name: `Fuzz Seed ${i}` } })).status).toBe(201)
  const page = await request(app, "GET", "/authors/paginated?per_page=1", { token: admin })
  cursor = (page.body as { meta: { next_cursor: string } }).meta.next_cursor
  expect(cursor).toBeTypeOf("string")
  figures.started = performance.now()
})

afterAll(async () => {
  const sorted = (m: Map<string, number>) => JSON.stringify(Object.fromEntries([...m.entries()].sort(([a], [b]) => a.localeCompare(b))))
  console.log(
    `[fuzz.ws] frames=${figures.fuzzFrames + figures.probes} (generated ${figures.fuzzFrames} + probes ${figures.probes}) over ${LANES.length} lanes,` +
      ` connections=${figures.connections} replies_by_status_code=${sorted(figures.replies)} closes_by_code=${sorted(figures.closes)}` +
      ` auth_ok=${figures.authOk} broadcasts_received=${figures.broadcasts}` +
      ` duration=${((performance.now() - figures.started) / 1000).toFixed(1)}s audit_probe_stored_after=${Math.round(figures.auditProbeMs)}ms`
  )
  await Promise.all(lanes.map((lane) => lane.close().catch(() => {})))
  await app?.close()
})

describe("WebSocket fault fuzzing (generated frames, JSON and protobuf)", () => {
  it(`${FRAMES}+ frames: usable envelopes are answered with a valid Response, never status_code 1 (no "Database error occurred"); others close 1003/1009 (1007 for bad UTF-8, 4001 for a bad re-auth), never 1011; closed connections are replaced`, async () => {
    const tokensOf = (i: number) => ({ own: laneTokens[i]!, other: laneTokens[(i + 1) % laneTokens.length]! })
    // Lanes of a format share its generator; the other-user token of each is the next lane's.
    const jsonLanes = lanes.flatMap((l, i) => (l.spec.format === "json" ? [i] : []))
    const protoLanes = lanes.flatMap((l, i) => (l.spec.format === "protobuf" ? [i] : []))
    const perRun = fc.tuple(
      fc.tuple(...jsonLanes.map((i) => fc.array(jsonFrames(tokensOf(i)), { minLength: PER_LANE, maxLength: PER_LANE }))),
      fc.tuple(...protoLanes.map((i) => fc.array(protoFrames(tokensOf(i)), { minLength: PER_LANE, maxLength: PER_LANE })))
    )
    await fc.assert(
      fc.asyncProperty(perRun, async ([jsonBatches, protoBatches]) => {
        const work = [
          ...jsonLanes.map((laneIndex, k) => ({ lane: lanes[laneIndex]!, frames: jsonBatches[k]! })),
          ...protoLanes.map((laneIndex, k) => ({ lane: lanes[laneIndex]!, frames: protoBatches[k]! }))
        ]
        const results = await Promise.allSettled(work.map(async ({ lane, frames }) => {
          for (const f of frames) await lane.check(f)
        }))
        const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected")
        if (failed !== undefined) {
          console.error(`[fuzz.ws] property violated: ${String(failed.reason instanceof Error ? failed.reason.message : failed.reason)}`)
          throw failed.reason
        }
      }),
      // Each run is a batch over all lanes; a violation reports its own frame, so no shrinking over batches.
      { numRuns: Math.ceil(FRAMES / (PER_LANE * LANES.length)), endOnFailure: true }
    )
    expect(figures.fuzzFrames).toBeGreaterThanOrEqual(FRAMES)
    expect(JSON_LANES + PROTO_LANES).toBe(LANES.length)
  }, 180_000)

  it("afterwards the audit trail still advances: a new WebSocket message's and a new HTTP request's records are stored", async () => {
    const probeUser = `ws-fuzz-probe-${randomUUID()}`
    const token = await signToken(app, { sub: probeUser, roles: ["get-authors"] })
    const started = performance.now()
    const probeLane = new Lane({ format: "json", auth: "query Authorization", roles: ["get-authors"] }, token, 99)
    await probeLane.check(frame("audit probe", JSON.stringify({ pkg_id: 1, req_id: randomUUID(), data: { filters: { id: -1 } } })))
    const reqId = randomUUID()
    await probeLane.check(frame("audit probe", JSON.stringify({ pkg_id: 2, req_id: reqId, data: { page: 1, per_page: 1 } })))
    await probeLane.close()
    const res = await request(app, "GET", "/authors?search=audit-probe", { token })
    expect(res.status).toBe(200)
    const [ws, http] = await Promise.all([
      awaitAuditRecord(app, admin, reqId, `&user_id=${probeUser}`),
      awaitAuditRecord(app, admin, res.headers.get("x-request-id")!, `&user_id=${probeUser}`)
    ])
    figures.auditProbeMs = performance.now() - started
    expect(ws).toMatchObject({ user_id: probeUser, action_type: "WS:GET_PAGINATED_AUTHORS", resource: "ws:/web", outcome: "success" })
    expect(http).toMatchObject({ user_id: probeUser, action_type: "GET", resource: "/authors", response_status: 200 })
  })
})
