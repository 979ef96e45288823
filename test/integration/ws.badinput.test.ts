/**
 * Bad input on `/web`, generated: random JSON, envelopes with wrong types, huge numbers, deep
 * nesting, random bytes, truncated protobuf, invalid UTF-8. Every frame is answered with a
 * status_code or closes the connection with a documented code (1003, 1007, 1009); the server never
 * crashes, never leaks a connection slot, and other connections are unaffected.
 */
import fc from "fast-check"
import { randomUUID } from "node:crypto"
import WebSocket from "ws"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { request, signToken, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs, type Envelope, protoCodec, type ProtoCodec, type WsClient } from "../support/WsClient.ts"

const RUNS = 80
/** What a client mistake may close with: unusable frame, invalid UTF-8, too big. */
const CLOSE_CODES = [1003, 1007, 1009]
/** WS_MAX_MESSAGE_BYTES (the default: this app does not set it). */
const MAX_FRAME = 65_536

let app: TestApp
let token: string
let codec: ProtoCodec
/** A connection of another user that must keep working throughout. */
let bystander: WsClient

beforeAll(async () => {
  app = await startTestApp({ config: { rateLimitEnabled: false, wsMaxConnectionsPerUser: 2, wsMessageRateLimit: 1_000_000 } })
  token = await signToken(app, { sub: "fuzzer", roles: ["get-authors", "create-author"] })
  codec = protoCodec(await (await fetch(`${app.url}/proto/websocket.proto`)).text())
  bystander = connectWs(app.url, { token: await signToken(app, { sub: "bystander", roles: ["get-authors"] }) })
  expect((await bystander.request(1, { filters: { id: -1 } })).status_code).toBe(0)
})
afterAll(async () => {
  bystander.ws.terminate()
  await app.close()
})

/** One connection of the fuzzing user at a time; a closed one is replaced. */
const session = (format: "json" | "protobuf") => {
  let client: WsClient | undefined
  const current = () => (client ??= connectWs(app.url, format === "json" ? { token } : { token, proto: codec }))
  const probe = (c: WsClient) => {
    const reqId = randomUUID()
    c.send(format === "json" ? { pkg_id: 1, req_id: reqId, data: { filters: { id: -1 } } } : codec.encodeRequest(1, reqId, { filters: { id: -1 } }))
    return c.response(reqId)
  }
  /**
   * Sends a frame, then a probe: either the socket closes with a client-mistake code, or the probe
   * is answered — after the frame's own answer when it had a usable pkg_id and req_id — and every
   * answer has a valid status_code. Says which: "answered", or "closed <code>".
   */
  const check = async (frame: string | Uint8Array, options: { readonly text?: boolean } = {}): Promise<"answered" | `closed ${number}`> => {
    const c = current()
    await c.opened
    if (frame instanceof Uint8Array && options.text === true) c.ws.send(frame, { binary: false })
    else c.send(frame)
    const outcome = await Promise.race([probe(c).then((r) => ({ probe: r })), c.closed.then((closed) => ({ closed }))])
    if ("closed" in outcome) {
      expect(CLOSE_CODES, `closed ${outcome.closed.code} ${outcome.closed.reason}`).toContain(outcome.closed.code)
      client = undefined
      return `closed ${outcome.closed.code}`
    }
    const answers: Array<Envelope> = [outcome.probe]
    while (c.responses.size > 0) answers.push(await c.responses.take())
    for (const a of answers) expect([0, 1, 2, 3]).toContain(a.status_code)
    const reqId = usableReqId(frame)
    if (reqId !== undefined) expect(answers.map((a) => a.req_id), "the frame was answered").toContain(reqId)
    return "answered" as const
  }
  const close = async () => {
    if (client !== undefined && client.ws.readyState !== WebSocket.CLOSED) await client.close()
    client = undefined
  }
  return { check, close }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** docs/websocket.md#messages: a JSON object with an integer pkg_id and a UUID req_id must be answered. */
const usableReqId = (frame: string | Uint8Array): string | undefined => {
  if (typeof frame !== "string") return undefined
  try {
    const value: unknown = JSON.parse(frame)
    if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined
    const { pkg_id, req_id, type } = value as Record<string, unknown>
    return type !== "auth" && typeof pkg_id === "number" && Number.isSafeInteger(pkg_id) && typeof req_id === "string" && UUID.test(req_id)
      ? req_id
      : undefined
  } catch {
    return undefined
  }
}

const uuid = fc.uuid()
const anyValue = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  fc.constantFrom(1e308, -1e308, 2 ** 53 + 1, -0, 1.5, "", "\u0000", "😀".repeat(50), [], {}, null, true),
  fc.bigInt().map((n) => n.toString())
)

/** JSON nested `depth` deep (arrays or objects). */
const nested = (depth: number, object: boolean) =>
  object ? `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}` : `${"[".repeat(depth)}1${"]".repeat(depth)}`

describe("WebSocket bad input (generated)", () => {
  it("any JSON text frame: answered with a status_code, or closed 1003", async () => {
    const s = session("json")
    await fc.assert(fc.asyncProperty(fc.jsonValue({ maxDepth: 5 }), async (value) => {
      await s.check(JSON.stringify(value))
    }), { numRuns: RUNS })
    await s.close()
  })

  it("envelopes with wrong or odd types in every field", async () => {
    const s = session("json")
    const envelope = fc.record({
      pkg_id: fc.oneof(fc.constantFrom(1, 2, 3, 0, -1, 2 ** 31, 2 ** 53 + 1, 1e308), anyValue),
      req_id: fc.oneof(uuid, anyValue),
      method: anyValue,
      data: anyValue
    }, { requiredKeys: [] })
    await fc.assert(fc.asyncProperty(envelope, async (value) => {
      await s.check(JSON.stringify(value))
    }), { numRuns: RUNS * 2 })
    await s.close()
  })

  it("each package's data with random fields and types", async () => {
    const s = session("json")
    const field = fc.oneof(anyValue, fc.integer(), fc.string())
    const data = fc.record({
      page: field,
      per_page: field,
      cursor: field,
      filters: fc.oneof(anyValue, fc.record({ id: field, name: field, search_term: field }, { requiredKeys: [] })),
      name: field
    }, { requiredKeys: [] })
    await fc.assert(fc.asyncProperty(fc.constantFrom(1, 2, 3), uuid, data, async (pkgId, reqId, d) => {
      expect(await s.check(JSON.stringify({ pkg_id: pkgId, req_id: reqId, data: d }))).toBe("answered")
    }), { numRuns: RUNS * 2 })
    await s.close()
  })

  it("deep nesting and frames at the size limit: above WS_MAX_MESSAGE_BYTES closes 1009, unanswered; below, the usual outcome", async () => {
    const s = session("json")
    const tooBig = (frame: string) => Buffer.byteLength(frame) > MAX_FRAME
    for (const depth of [100, 1000, 20_000, 32_000]) {
      for (const object of [false, true]) {
        // Not an envelope (an array, or an object without pkg_id): unusable.
        const bare = nested(depth, object)
        expect(await s.check(bare), `bare, depth ${depth}`).toBe(tooBig(bare) ? "closed 1009" : "closed 1003")
        // A usable envelope whose data is too deep: answered (status_code 2) while it fits.
        const envelope = `{"pkg_id":1,"req_id":"${randomUUID()}","data":{"filters":${nested(depth, object)}}}`
        expect(await s.check(envelope), `envelope, depth ${depth}`).toBe(tooBig(envelope) ? "closed 1009" : "answered")
      }
    }
    // Both sides of the limit, with a usable envelope.
    const padded = (bytes: number) => {
      const head = `{"pkg_id":1,"req_id":"${randomUUID()}","data":{"x":"`
      return `${head}${"y".repeat(bytes - head.length - 3)}"}}`
    }
    expect(Buffer.byteLength(padded(MAX_FRAME))).toBe(MAX_FRAME)
    expect(await s.check(padded(MAX_FRAME))).toBe("answered")
    expect(await s.check(padded(MAX_FRAME + 1))).toBe("closed 1009")
    expect(await s.check(`{"pkg_id":1,"req_id":"${randomUUID()}","data":{"x":"${"y".repeat(70_000)}"}}`)).toBe("closed 1009")
    await s.close()
  })

  it("random binary frames in json format close 1003; invalid UTF-8 in a text frame closes 1007", async () => {
    const s = session("json")
    await fc.assert(fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 300 }), async (bytes) => {
      expect(await s.check(bytes)).toBe("closed 1003")
    }), { numRuns: 20 })
    expect(await s.check(new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]), { text: true })).toBe("closed 1007")
    await s.close()
  })

  it("protobuf: random bytes, truncated requests and random data_json", async () => {
    const s = session("protobuf")
    await fc.assert(fc.asyncProperty(fc.uint8Array({ maxLength: 300 }), async (bytes) => {
      await s.check(bytes)
    }), { numRuns: RUNS })
    await fc.assert(fc.asyncProperty(fc.constantFrom(1, 2, 3, 77), uuid, fc.jsonValue({ maxDepth: 3 }), fc.nat(), async (pkgId, reqId, data, cut) => {
      const full = codec.encodeRequest(pkgId, reqId, data)
      await s.check(full.subarray(0, cut % (full.length + 1)))
    }), { numRuns: RUNS })
    await fc.assert(fc.asyncProperty(fc.constantFrom(1, 2, 3), uuid, fc.string({ unit: "binary" }), async (pkgId, reqId, dataJson) => {
      expect(await s.check(codec.encodeRequest(pkgId, reqId, dataJson))).toBe("answered")
    }), { numRuns: RUNS })
    await s.close()
  })

  it("afterwards: no slot leaked (the fuzzing user opens its full allowance), the bystander still served, health counts only open connections", async () => {
    const fresh = [connectWs(app.url, { token }), connectWs(app.url, { token })]
    for (const c of fresh) expect((await c.request(1, { filters: { id: -1 } })).status_code).toBe(0)
    expect((await bystander.request(2, { page: 1, per_page: 1 })).status_code).toBe(0)
    const health = await request(app, "GET", "/health")
    expect(health.status).toBe(200)
    expect((health.body as { websocket: { active_connections: number } }).websocket.active_connections).toBe(3)
    await Promise.all(fresh.map((c) => c.close()))
  })
})
