/**
 * The wire, read byte for byte from raw sockets (RFC 9112; docs/http-api.md#http11-on-the-wire,
 * docs/websocket.md#close-codes): every request on a connection gets exactly one answer, in order — a request
 * the parser refuses included, after the answers before it, then the close; requests pipelined
 * behind a write see it; ambiguous framing (HTTP/1.0 with Transfer-Encoding) and ambiguous headers
 * (two Host or two Authorization lines) are refused, and nothing after them runs; parser refusals
 * are counted in `http_requests_total`; a WebSocket client flooding pings without reading the
 * pongs gets a Close frame 1008, not a TCP reset, while another client carries on.
 *
 * Rate limits are off: a file of many requests from one user must not meet them.
 */
import { randomUUID } from "node:crypto"
import { readFileSync } from "node:fs"
import { connect } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { closeCode, encodeFrame, Opcode, rawWs } from "../support/RawWs.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"

/** Liveness guard only: a connection that neither answers nor closes by then is a failure. */
const HANG_MS = 20_000

interface WireResponse {
  readonly status: number
  readonly statusLine: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

interface Exchange {
  /** Every response read, in order. */
  readonly responses: ReadonlyArray<WireResponse>
  /** The server closed the connection. */
  readonly closed: boolean
  /** Bytes after the last whole response (a partial one, or anything that is not a response). */
  readonly rest: string
  /** Everything read, as latin1 text. */
  readonly raw: string
}

/** Splits what a client read into whole responses (Content-Length or chunked bodies). */
const parseResponses = (bytes: Buffer): { responses: Array<WireResponse>; rest: Buffer } => {
  const responses: Array<WireResponse> = []
  let buffer = bytes
  for (;;) {
    const end = buffer.indexOf("\r\n\r\n")
    if (end < 0) break
    const lines = buffer.subarray(0, end).toString("latin1").split("\r\n")
    const statusLine = lines[0]!
    const headers: Record<string, string> = {}
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(":")
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    let offset = end + 4
    let body: Buffer
    if (headers["transfer-encoding"]?.toLowerCase() === "chunked") {
      const chunks: Array<Buffer> = []
      for (;;) {
        const lineEnd = buffer.indexOf("\r\n", offset)
        if (lineEnd < 0) return { responses, rest: buffer }
        const size = parseInt(buffer.subarray(offset, lineEnd).toString("latin1"), 16)
        if (buffer.length < lineEnd + 2 + size + 2) return { responses, rest: buffer }
        chunks.push(buffer.subarray(lineEnd + 2, lineEnd + 2 + size))
        offset = lineEnd + 2 + size + 2
        if (size === 0) break
      }
      body = Buffer.concat(chunks)
    } else {
      const length = Number(headers["content-length"] ?? "0")
      if (buffer.length < offset + length) break
      body = buffer.subarray(offset, offset + length)
      offset += length
    }
    responses.push({ status: Number(statusLine.split(" ")[1]), statusLine, headers, body: body.toString("utf8") })
    buffer = buffer.subarray(offset)
  }
  return { responses, rest: buffer }
}

/**
 * Writes `bytes` on a fresh connection (in one write, or one write per part) and reads until the
 * server closes it — or, with `responses`, until that many whole responses were read.
 */
const exchange = (
  port: number,
  bytes: string | Buffer | ReadonlyArray<string | Buffer>,
  options: { readonly responses?: number } = {}
): Promise<Exchange> =>
  new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1")
    const chunks: Array<Buffer> = []
    const finish = (closed: boolean) => {
      clearTimeout(timer)
      const raw = Buffer.concat(chunks)
      const { responses, rest } = parseResponses(raw)
      socket.destroy()
      resolve({ responses, closed, rest: rest.toString("latin1"), raw: raw.toString("latin1") })
    }
    const timer = setTimeout(() => {
      socket.destroy()
      const { responses } = parseResponses(Buffer.concat(chunks))
      reject(new Error(`no close within ${HANG_MS} ms; read: ${responses.map((r) => r.statusLine).join(" | ")}`))
    }, HANG_MS)
    socket.on("data", (chunk: Buffer) => {
      chunks.push(chunk)
      if (options.responses !== undefined && parseResponses(Buffer.concat(chunks)).responses.length >= options.responses) finish(false)
    })
    socket.on("error", () => {})
    socket.on("close", () => finish(true))
    for (const part of Array.isArray(bytes) ? bytes : [bytes]) socket.write(part)
  })

const statuses = (e: Exchange) => e.responses.map((r) => r.status)
const json = (r: WireResponse | undefined) => (r === undefined ? undefined : JSON.parse(r.body) as unknown)

let app: TestApp
let port: number
let admin: string
let reader: string

const uniqueName = () => `wire-${randomUUID().slice(0, 12)}`

const post = (name: string, extra = "") => {
  const body = JSON.stringify({ name })
  return `POST /authors HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${admin}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`
}
const getByName = (name: string, extra = "") =>
  `GET /authors?name=${encodeURIComponent(name)} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${admin}\r\n${extra}\r\n`
const livez = (extra = "") => `GET /livez HTTP/1.1\r\nHost: localhost\r\n${extra}\r\n`

/** The authors named `name`, read over a fresh HTTP request. */
const authorsNamed = async (name: string) => {
  const res = await request(app, "GET", `/authors?name=${encodeURIComponent(name)}`, { token: admin })
  expect(res.status).toBe(200)
  return (res.body as Array<{ name: string }>).filter((a) => a.name === name)
}

const expectRefusal = (r: WireResponse | undefined, status: number, detail: string) => {
  expect(r?.status).toBe(status)
  expect(r?.headers["content-type"]).toBe("application/json")
  expect(r?.headers["connection"]).toBe("close")
  expect(r?.headers["x-content-type-options"]).toBe("nosniff")
  expect(json(r)).toEqual({ detail })
}

beforeAll(async () => {
  app = await startTestApp({ config: { rateLimitEnabled: false } })
  port = Number(new URL(app.url).port)
  admin = (await login(app, "admin")).access_token
  reader = (await login(app, "reader")).access_token
})

afterAll(async () => {
  await app.close()
})

describe("one answer per request, in order, then the close (RFC 9112 §9.3, §9.6)", () => {
  it("pipelined POST then a line that is not HTTP: 201 for the POST, then 400 {detail}, then the close", async () => {
    const name = uniqueName()
    const result = await exchange(port, post(name) + "THIS IS NOT HTTP\r\n\r\n")
    expect(statuses(result)).toEqual([201, 400])
    expect(json(result.responses[0])).toMatchObject({ name })
    expectRefusal(result.responses[1], 400, "Bad request")
    expect(result.closed).toBe(true)
    expect(result.rest).toBe("")
    expect(await authorsNamed(name)).toHaveLength(1)
  })

  it("pipelined POST then a header section over 16 KiB: 201, then 431 {detail}, then the close", async () => {
    const name = uniqueName()
    const oversized = `GET /authors HTTP/1.1\r\nHost: localhost\r\nX-Filler: ${"a".repeat(20_000)}\r\n\r\n`
    const result = await exchange(port, post(name) + oversized)
    expect(statuses(result)).toEqual([201, 431])
    expectRefusal(result.responses[1], 431, "Request header fields too large")
    expect(result.closed).toBe(true)
    expect(await authorsNamed(name)).toHaveLength(1)
  })

  it("pipelined POST then a POST with a bad chunk size: 201, then 400 for the second, which creates nothing", async () => {
    const first = uniqueName()
    const second = uniqueName()
    const body = JSON.stringify({ name: second })
    const badChunked = `POST /authors HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${admin}\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\nZZ\r\n`
    const result = await exchange(port, post(first) + badChunked)
    expect(statuses(result)).toEqual([201, 400])
    expectRefusal(result.responses[1], 400, "Bad request")
    expect(result.closed).toBe(true)
    expect(await authorsNamed(first)).toHaveLength(1)
    expect(await authorsNamed(second)).toEqual([])
  })

  it("pipelined requests before one with Connection: close are all answered, in order, then the close; what follows is not run", async () => {
    const created = uniqueName()
    const after = uniqueName()
    const result = await exchange(port, livez() + post(created) + getByName(created, "Connection: close\r\n") + post(after))
    expect(statuses(result)).toEqual([200, 201, 200])
    expect(json(result.responses[2])).toMatchObject([{ name: created }])
    expect(result.responses[2]?.headers["connection"]).toBe("close")
    expect(result.closed).toBe(true)
    expect(result.rest).toBe("")
    expect(await authorsNamed(after)).toEqual([])
  })

  it("pipelined POST then a WebSocket upgrade: the 201 first, then the 101", async () => {
    const name = uniqueName()
    const upgrade = `GET /web?token=${admin} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      `Sec-WebSocket-Key: ${Buffer.from(randomUUID().slice(0, 16)).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n\r\n`
    const result = await exchange(port, post(name) + upgrade, { responses: 2 })
    expect(statuses(result)).toEqual([201, 101])
    expect(json(result.responses[0])).toMatchObject({ name })
  })

  it("pipelined POST then a POST whose body is over the limit: 201, then 413 (a held request's body is still bounded)", async () => {
    const name = uniqueName()
    const big = Buffer.alloc(2 * 1_048_576, "a")
    const oversized = `POST /authors HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${admin}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${big.length}\r\n\r\n`
    const result = await exchange(port, [post(name) + oversized, big], { responses: 2 })
    expect(statuses(result).slice(0, 2)).toEqual([201, 413])
    expect(json(result.responses[1])).toMatchObject({ detail: expect.any(String) })
    expect(await authorsNamed(name)).toHaveLength(1)
  })
})

describe("requests behind a write wait for it (RFC 9112 §9.3.2)", () => {
  it("pipelined POST then GET: the GET sees the author; then DELETE then GET: the GET sees it gone (every time)", async () => {
    for (let round = 0; round < 5; round++) {
      const name = uniqueName()
      const created = await exchange(port, post(name) + getByName(name, "Connection: close\r\n"))
      expect(statuses(created)).toEqual([201, 200])
      const author = json(created.responses[0]) as { id: number; name: string }
      expect(json(created.responses[1])).toEqual([author])

      const del = `DELETE /authors/${author.id} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${admin}\r\n\r\n`
      const deleted = await exchange(port, del + getByName(name, "Connection: close\r\n"))
      expect(statuses(deleted)).toEqual([204, 200])
      expect(json(deleted.responses[1])).toEqual([])
    }
  })

  it("pipelined POST then 1,000 GETs in one write: every one answered, in order (the socket is read again as answers go out)", async () => {
    const name = uniqueName()
    const gets = Array.from({ length: 1_000 }, (_, i) => `GET /livez?n=${i} HTTP/1.1\r\nHost: localhost\r\n\r\n`).join("")
    const result = await exchange(port, post(name) + gets + getByName(name, "Connection: close\r\n"))
    expect(statuses(result)).toEqual([201, ...Array.from({ length: 1_000 }, () => 200), 200])
    expect(json(result.responses.at(-1))).toMatchObject([{ name }])
    expect(result.closed).toBe(true)
  })

  it("pipelined safe requests keep the connection open and are answered in order", async () => {
    const name = uniqueName()
    await exchange(port, post(name), { responses: 1 })
    const result = await exchange(port, getByName(name) + livez() + getByName("nobody-has-this-name"), { responses: 3 })
    expect(statuses(result)).toEqual([200, 200, 200])
    expect(json(result.responses[0])).toMatchObject([{ name }])
    expect(json(result.responses[1])).toEqual({ status: "ok" })
    expect(json(result.responses[2])).toEqual([])
    expect(result.closed).toBe(false)
  })
})

describe("ambiguous framing and headers are refused (RFC 9112 §6.1, §3.2)", () => {
  it("HTTP/1.0 with Transfer-Encoding → 400 {detail} and the close; neither it nor the request smuggled after its body runs", async () => {
    const refused = uniqueName()
    const smuggled = uniqueName()
    const body = JSON.stringify({ name: refused })
    const http10 = `POST /authors HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\nAuthorization: Bearer ${admin}\r\n` +
      `Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`
    const result = await exchange(port, http10 + post(smuggled))
    expect(statuses(result)).toEqual([400])
    expectRefusal(result.responses[0], 400, "Bad request")
    expect(result.closed).toBe(true)
    expect(await authorsNamed(refused)).toEqual([])
    expect(await authorsNamed(smuggled)).toEqual([])
  })

  it("two Host lines → 400 {detail: \"Bad request\"} and the close", async () => {
    const result = await exchange(port, `GET /livez HTTP/1.1\r\nHost: localhost\r\nHost: elsewhere.example\r\n\r\n`)
    expect(statuses(result)).toEqual([400])
    expectRefusal(result.responses[0], 400, "Bad request")
    expect(result.closed).toBe(true)
  })

  it("two Authorization lines (admin's, then a reader's) → 400 {detail: \"Bad request\"}; the POST creates nothing", async () => {
    const name = uniqueName()
    const body = JSON.stringify({ name })
    const twoTokens = `POST /authors HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${admin}\r\nAuthorization: Bearer ${reader}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Correlation-ID: two-tokens\r\n\r\n${body}`
    const result = await exchange(port, twoTokens)
    expect(statuses(result)).toEqual([400])
    expectRefusal(result.responses[0], 400, "Bad request")
    expect(result.responses[0]?.headers["x-correlation-id"]).toBe("two-tokens")
    expect(result.closed).toBe(true)
    expect(await authorsNamed(name)).toEqual([])
  })

  it("HTTP/1.1 without Host → 400 {detail: \"Bad request\"} and the close", async () => {
    const result = await exchange(port, `GET /livez HTTP/1.1\r\nX-Correlation-ID: no-host\r\n\r\n`)
    expect(statuses(result)).toEqual([400])
    expectRefusal(result.responses[0], 400, "Bad request")
    expect(result.responses[0]?.headers["x-correlation-id"]).toBe("no-host")
    expect(result.closed).toBe(true)
  })

  it("a HEAD request with two Host lines → 400 without a body (nothing a client would read as a next response)", async () => {
    const result = await exchange(port, `HEAD /livez HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n`)
    expect(result.closed).toBe(true)
    expect(result.raw).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/)
    expect(result.raw).toMatch(/\r\nConnection: close\r\n\r\n$/)
  })

  it("pipelined GET then a request with two Host lines: 200, then 400, then the close", async () => {
    const result = await exchange(port, livez() + `GET /livez HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n` + livez())
    expect(statuses(result)).toEqual([200, 400])
    expect(result.closed).toBe(true)
  })
})

/** `MAX_REQUEST_BODY_BYTES`, at its default (the app of this file runs with it). */
const LIMIT = 1_048_576

/** A request carrying `body`, framed by a Content-Length of `declared` (the body's own length unless told) or chunked in two chunks. */
const withBody = (
  method: string,
  path: string,
  body: Buffer,
  framing: { readonly chunked?: boolean; readonly declared?: number; readonly token?: string } = {}
): Buffer => {
  const auth = framing.token === undefined ? "" : `Authorization: Bearer ${framing.token}\r\n`
  const head = `${method} ${path} HTTP/1.1\r\nHost: localhost\r\n${auth}Content-Type: application/json\r\n`
  if (framing.chunked !== true) return Buffer.concat([Buffer.from(`${head}Content-Length: ${framing.declared ?? body.length}\r\n\r\n`), body])
  const half = body.length >> 1
  const chunk = (part: Buffer) => Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from("\r\n")])
  return Buffer.concat([Buffer.from(`${head}Transfer-Encoding: chunked\r\n\r\n`), chunk(body.subarray(0, half)), chunk(body.subarray(half)), Buffer.from("0\r\n\r\n")])
}

/** The status line and headers of the first response (a HEAD's carries no body to parse). */
const head = (e: Exchange) => {
  const [statusLine = "", ...lines] = e.raw.slice(0, e.raw.indexOf("\r\n\r\n")).split("\r\n")
  return { status: Number(statusLine.split(" ")[1]), headers: Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()])) }
}

describe("body size first, whatever the method (docs/errors-and-limits.md#check-order)", () => {
  const over = Buffer.alloc(LIMIT + 1, "x")
  const at = Buffer.alloc(LIMIT, "x")

  it("GET, HEAD, OPTIONS and DELETE with a body one byte over the limit → 413 before authentication, then the close", async () => {
    for (const method of ["GET", "HEAD", "OPTIONS", "DELETE"]) {
      for (const chunked of [false, true]) {
        const result = await exchange(port, withBody(method, "/authors", over, { chunked }))
        expect({ method, chunked, ...head(result) }).toMatchObject({ method, chunked, status: 413, headers: { connection: "close" } })
        if (method !== "HEAD") expectRefusal(result.responses[0], 413, "Request body too large")
        expect(result.closed).toBe(true)
      }
    }
  })

  it("a body of exactly the limit passes the size check, whatever the method and framing", async () => {
    for (const chunked of [false, true]) {
      // Unauthenticated: the next check answers (401), not the size check.
      const anonymous = await exchange(port, withBody("GET", "/authors", at, { chunked }), { responses: 1 })
      expect({ chunked, status: statuses(anonymous)[0] }).toEqual({ chunked, status: 401 })
      // Authenticated: the handler answers (a body nobody reads: Node closes after the answer).
      const read = await exchange(port, withBody("GET", "/authors", at, { chunked, token: admin }), { responses: 1 })
      expect({ chunked, status: statuses(read)[0] }).toEqual({ chunked, status: 200 })
      expect(Array.isArray(json(read.responses[0]))).toBe(true)
      const probe = await exchange(port, [withBody("HEAD", "/livez", at, { chunked }), livez("Connection: close\r\n")])
      expect({ chunked, head: head(probe).status, closed: probe.closed }).toEqual({ chunked, head: 200, closed: true })
    }
  })

  it("a Content-Length that lies: over the limit with the body never sent → 413 at once; under it, the bytes beyond it are no body but the next request", async () => {
    // Declares one byte over the limit, sends ten and waits: the 413 does not wait for the rest.
    const promised = await exchange(port, withBody("GET", "/livez", Buffer.alloc(10, "x"), { declared: LIMIT + 1 }))
    expectRefusal(promised.responses[0], 413, "Request body too large")
    expect(promised.closed).toBe(true)
    // Declares ten bytes and sends more than the limit: the ten are the GET's body (200); the rest
    // is read as a request, which it is not (400, then the close) — never as this request's body.
    const overflowing = await exchange(port, withBody("GET", "/livez", over, { declared: 10 }))
    expect(statuses(overflowing)).toEqual([200, 400])
    expect(overflowing.closed).toBe(true)
  })
})

describe("requests the parser refuses are counted (http_requests_total, endpoint \"unmatched\")", () => {
  it("400, 431 and the refused duplicates are counted with the method when it is known", async () => {
    const before = await scrapeMetrics(app.url)
    const count = (m: typeof before, labels: Record<string, string>) =>
      m.sum("http_requests_total", { endpoint: "unmatched", ...labels })

    // A control byte in a header: the request line was read, the method is known.
    expect(statuses(await exchange(port, `PUT /authors/1 HTTP/1.1\r\nHost: localhost\r\nX-Bad: a\u0001b\r\n\r\n`))).toEqual([400])
    // Not HTTP at all: no method.
    expect(statuses(await exchange(port, "\u0016\u0003\u0001 not http\r\n\r\n"))).toEqual([400])
    // A header section over 16 KiB.
    expect(statuses(await exchange(port, `GET / HTTP/1.1\r\nX-Filler: ${"a".repeat(20_000)}\r\n\r\n`))).toEqual([431])
    // Two Host lines.
    expect(statuses(await exchange(port, `DELETE /authors/1 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n`))).toEqual([400])

    const after = await scrapeMetrics(app.url)
    expect(count(after, { method: "PUT", status_code: "400" }) - count(before, { method: "PUT", status_code: "400" })).toBe(1)
    expect(count(after, { method: "UNKNOWN", status_code: "400" }) - count(before, { method: "UNKNOWN", status_code: "400" })).toBe(1)
    expect(count(after, { status_code: "431" }) - count(before, { status_code: "431" })).toBe(1)
    expect(count(after, { method: "DELETE", status_code: "400" }) - count(before, { method: "DELETE", status_code: "400" })).toBe(1)
    // Bounded labels: the parser's methods or UNKNOWN, never what the client wrote.
    const methods = new Set(after.find("http_requests_total", { endpoint: "unmatched" }).map((s) => s.labels["method"]))
    expect([...methods].every((m) => m === "UNKNOWN" || /^[A-Z-]+$/.test(m ?? ""))).toBe(true)
  })
})

/** What the kernel may hold on loopback before the server's own send buffer grows (both ends, at most). */
const kernelBufferBytes = () => {
  const max = (file: string, fallback: number) => {
    try {
      return Number(readFileSync(file, "utf8").trim().split(/\s+/)[2])
    } catch {
      return fallback
    }
  }
  return max("/proc/sys/net/ipv4/tcp_rmem", 32 * 1024 * 1024) + max("/proc/sys/net/ipv4/tcp_wmem", 32 * 1024 * 1024)
}

describe("WebSocket control frames", () => {
  it("a client that reads gets a pong for each of 1,000 pings sent in one write, and stays open", async () => {
    const client = rawWs(`${app.wsUrl}/web?token=${admin}`)
    expect((await client.upgraded).status).toBe(101)
    const payloads = Array.from({ length: 1_000 }, (_, i) => Buffer.from(`ping-${i}`))
    client.socket.write(Buffer.concat(payloads.map((p) => encodeFrame(Opcode.Ping, p))))
    for (const payload of payloads) {
      const frame = await Promise.race([client.frames.take((f) => f.opcode !== Opcode.Text), client.ended.then(() => undefined)])
      if (frame === undefined) throw new Error("the connection ended")
      expect(frame.opcode).toBe(Opcode.Pong)
      expect(frame.payload.toString()).toBe(payload.toString())
    }
    client.destroy()
  })

  it("a client flooding pings without reading the pongs gets Close 1008 \"Policy violation\"; another client carries on", async () => {
    const other = connectWs(app.url, { token: admin })
    expect((await other.request(2, { page: 1, per_page: 1 })).status_code).toBe(0)

    const flooder = rawWs(`${app.wsUrl}/web?token=${admin}`)
    expect((await flooder.upgraded).status).toBe(101)
    flooder.socket.pause() // reads nothing from here on
    // Enough pings that their pongs fill every kernel buffer between the two ends and then more
    // than the server holds for a client (2 MiB), with a wide margin.
    const ping = encodeFrame(Opcode.Ping, Buffer.alloc(125, 0x70))
    const pongBytes = 127
    const pings = Math.ceil(((kernelBufferBytes() + 4 * 1024 * 1024) / pongBytes) * 1.5)
    const batch = Buffer.concat(Array.from({ length: 1_000 }, () => ping))
    for (let sent = 0; sent < pings && !flooder.socket.destroyed; sent += 1_000) {
      if (!flooder.socket.write(batch)) await Promise.race([new Promise((resolve) => flooder.socket.once("drain", resolve)), flooder.ended])
    }

    // Meanwhile the other client is served.
    expect((await other.request(2, { page: 1, per_page: 1 })).status_code).toBe(0)

    // Now read: pongs, then the close frame (not the end of the socket without one).
    flooder.socket.resume()
    const close = await Promise.race([
      flooder.frames.take((frame) => frame.opcode === Opcode.Close),
      flooder.ended.then(() => undefined)
    ])
    if (close === undefined) throw new Error("the connection ended without a Close frame")
    const pongs = flooder.frames.size // every frame before the close
    expect(closeCode(close)).toBe(1008)
    expect(close.payload.subarray(2).toString("utf8")).toBe("Policy violation")
    expect(pongs).toBeGreaterThan(0)
    expect(pongs).toBeLessThan(pings)
    flooder.destroy()

    expect((await other.request(2, { page: 1, per_page: 1 })).status_code).toBe(0)
    expect(other.ws.readyState).toBe(other.ws.OPEN)
    await other.close()
  })
})
