/**
 * A wrong method on a known path (FastAPI's answer): 405 `{detail: "Method Not Allowed"}` with an
 * `Allow` header listing the methods the path's route serves (HEAD wherever GET is: the router
 * answers HEAD with the GET route), decided on the path alone — before authentication, without
 * reading the body — with the usual ids and security headers, counted under the route's template.
 * Unknown paths stay 404; `DELETE /authors/paginated` is the `{author_id}` route's (422). The 405
 * is not in the OpenAPI document.
 */
import { randomUUID } from "node:crypto"
import { request as httpRequest } from "node:http"
import { connect } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { awaitAuditRecord } from "../support/AuditTrail.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"

const NOT_ALLOWED = { detail: "Method Not Allowed" }
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** A request on its own connection, the target exactly as given, optionally with a chunked body. */
const raw = (app: TestApp, method: string, path: string, options: { body?: string; chunked?: boolean; headers?: Record<string, string> } = {}) =>
  new Promise<{ status: number; headers: Record<string, string | Array<string> | undefined>; body: string }>((resolve, reject) => {
    const url = new URL(app.url)
    const headers: Record<string, string> = { ...options.headers }
    if (options.body !== undefined && options.chunked !== true) headers["content-length"] = String(Buffer.byteLength(options.body))
    const req = httpRequest({ host: url.hostname, port: url.port, path, method, headers, agent: false }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }))
    })
    req.on("error", reject)
    if (options.body !== undefined && options.chunked === true) {
      req.write(options.body.slice(0, 1))
      req.end(options.body.slice(1))
    } else req.end(options.body)
  })

describe("405 Method Not Allowed", () => {
  let app: TestApp
  let admin: string
  beforeAll(async () => {
    app = await startTestApp({ config: { rateLimitPerMinute: 10_000 } })
    admin = (await login(app, "admin")).access_token
  })
  afterAll(() => app?.close())

  it("a known path of the API asked with another method: 405 with the methods of its route in Allow", async () => {
    // GET /authors/{author_id} is newer than the rest: whether this build serves it decides Allow.
    const servesGetAuthor = (await request(app, "GET", "/authors/1", { token: admin })).status !== 405
    const authorAllow = servesGetAuthor ? "GET, HEAD, PUT, DELETE" : "PUT, DELETE"
    const cases: ReadonlyArray<readonly [string, string, string]> = [
      ["PATCH", "/authors", "GET, HEAD, POST"],
      ["DELETE", "/authors", "GET, HEAD, POST"],
      ["POST", "/authors/paginated", "GET, HEAD"],
      ["POST", "/authors/1", authorAllow],
      ["PATCH", "/authors/abc", authorAllow],
      ["GET", "/login", "POST"],
      ["PUT", "/login/refresh", "POST"],
      ["POST", "/audit-logs", "GET, HEAD"],
      ["DELETE", "/audit-logs/1", "GET, HEAD"],
      ["POST", "/audit-logs/user/someone", "GET, HEAD"],
      ["POST", "/health", "GET, HEAD"],
      ["DELETE", "/livez", "GET, HEAD"],
      ["PUT", "/readyz", "GET, HEAD"],
      ["POST", "/metrics", "GET, HEAD"],
      ["PUT", "/api/profiling/status", "GET, HEAD"],
      ["DELETE", "/api/profiling/reports", "GET, HEAD, POST"],
      ["POST", "/api/profiling/reports/a.html", "GET, HEAD, DELETE"],
      // As the router matches: a trailing slash, the case and duplicate slashes do not matter.
      ["PATCH", "/authors/", "GET, HEAD, POST"],
      ["PATCH", "/AUTHORS", "GET, HEAD, POST"],
      ["PATCH", "//authors//1", authorAllow],
      ["PATCH", "/authors?name=x", "GET, HEAD, POST"]
    ]
    for (const [method, path, allow] of cases) {
      for (const token of [undefined, admin]) {
        const res = await raw(app, method, path, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } })
        expect({ method, path, status: res.status, allow: res.headers["allow"], body: JSON.parse(res.body) as unknown })
          .toEqual({ method, path, status: 405, allow, body: NOT_ALLOWED })
      }
    }
  })

  it("the routes beside the API (OpenAPI, docs pages, /web and its companions) answer GET, and 405 to any other method", async () => {
    for (const path of ["/openapi.json", "/docs", "/redoc", "/web", "/proto/websocket.proto", "/asyncapi.json"]) {
      const get = await raw(app, "GET", path)
      expect({ path, status: get.status }).toEqual({ path, status: path === "/web" ? 426 : 200 })
      for (const method of ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"]) {
        const res = await raw(app, method, path)
        expect({ path, method, status: res.status, allow: res.headers["allow"], body: JSON.parse(res.body) as unknown })
          .toEqual({ path, method, status: 405, allow: "GET, HEAD", body: NOT_ALLOWED })
      }
    }
  })

  it("HEAD is served wherever GET is, and is a 405 (no body) where GET is not", async () => {
    expect((await raw(app, "HEAD", "/health")).status).toBe(200)
    expect((await raw(app, "HEAD", "/authors", { headers: { authorization: `Bearer ${admin}` } })).status).toBe(200)
    const login_ = await raw(app, "HEAD", "/login")
    expect({ status: login_.status, allow: login_.headers["allow"], body: login_.body }).toEqual({ status: 405, allow: "POST", body: "" })
  })

  it("OPTIONS without CORS configured is a 405 too (no preflight is answered)", async () => {
    for (const headers of [{}, { origin: "https://app.example", "access-control-request-method": "POST" }]) {
      const res = await raw(app, "OPTIONS", "/authors", { headers })
      expect({ status: res.status, allow: res.headers["allow"], body: JSON.parse(res.body) as unknown })
        .toEqual({ status: 405, allow: "GET, HEAD, POST", body: NOT_ALLOWED })
      expect(res.headers["access-control-allow-origin"]).toBeUndefined()
    }
  })

  it("unknown paths stay 404 whatever the method", async () => {
    for (const method of ["GET", "POST", "PATCH", "DELETE", "OPTIONS"]) {
      for (const path of ["/nope", "/api/authors", "/authors/1/extra", "/authors/paginated/1", "/audit-logs/user/a/b", "/api/profiling"]) {
        const res = await raw(app, method, path)
        expect({ method, path, status: res.status, allow: res.headers["allow"], body: JSON.parse(res.body) as unknown })
          .toEqual({ method, path, status: 404, allow: undefined, body: { detail: "Not Found" } })
      }
    }
  })

  it("DELETE /authors/paginated is the {author_id} route's: 422 at path author_id", async () => {
    const res = await request(app, "DELETE", "/authors/paginated", { token: admin })
    expect(res.status).toBe(422)
    expect((res.body as { detail: Array<{ loc: Array<string> }> }).detail[0]!.loc).toEqual(["path", "author_id"])
  })

  it("a wrong method's body is never read nor validated: malformed, oversized-looking or chunked, it is the 405", async () => {
    const bodies = ["{", "not json at all", JSON.stringify({ name: 1 }), "[".repeat(10_000)]
    for (const body of bodies) {
      for (const chunked of [false, true]) {
        const res = await raw(app, "PATCH", "/authors", {
          body,
          chunked,
          headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" }
        })
        expect({ body: body.slice(0, 20), chunked, status: res.status, text: res.body }).toEqual({
          body: body.slice(0, 20),
          chunked,
          status: 405,
          text: JSON.stringify(NOT_ALLOWED)
        })
      }
    }
  })

  it("carries the usual headers: ids, security headers, rate-limit headers", async () => {
    const res = await raw(app, "PATCH", "/authors/1", { headers: { authorization: `Bearer ${admin}`, "x-correlation-id": "wrong-method-1" } })
    expect(res.status).toBe(405)
    expect(res.headers["x-correlation-id"]).toBe("wrong-method-1")
    expect(res.headers["x-request-id"]).toMatch(UUID)
    expect(res.headers["x-content-type-options"]).toBe("nosniff")
    expect(res.headers["x-frame-options"]).toBe("DENY")
    expect(res.headers["content-type"]).toContain("application/json")
    expect(res.headers["x-ratelimit-limit"]).toBeDefined()
  })

  it("is audited as the request it was (no body recorded: it was not read)", async () => {
    const res = await raw(app, "PATCH", "/authors/7?reason=audit", {
      body: JSON.stringify({ name: "never read" }),
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" }
    })
    expect(res.status).toBe(405)
    const item = await awaitAuditRecord(app, admin, String(res.headers["x-request-id"]))
    const record = (await request(app, "GET", `/audit-logs/${item.id}`, { token: admin })).body as Record<string, unknown>
    expect(record).toMatchObject({
      action_type: "PATCH",
      resource: "/authors/7",
      response_status: 405,
      outcome: "error",
      error_message: "Method Not Allowed",
      request_data: { query: { reason: "audit" } }
    })
    expect(record["request_data"]).not.toHaveProperty("body")
  })

  it("is counted under the path's route template, never the raw path", async () => {
    const id = randomUUID()
    const res = await raw(app, "PATCH", `/authors/${id}`)
    expect(res.status).toBe(405)
    const metrics = await scrapeMetrics(app.url)
    expect(metrics.value("http_requests_total", { method: "PATCH", endpoint: "/authors/{author_id}", status_code: "405" })).toBeGreaterThanOrEqual(1)
    expect(metrics.find("http_requests_total", (labels) => Object.values(labels).some((v) => v.includes(id)))).toEqual([])
    const docs = { method: "POST", endpoint: "/docs", status_code: "405" }
    const before = metrics.firstOrZero("http_requests_total", docs)
    expect((await raw(app, "POST", "/docs")).status).toBe(405)
    expect((await scrapeMetrics(app.url)).value("http_requests_total", docs)).toBe(before + 1)
    expect((await scrapeMetrics(app.url)).find("http_requests_total", { endpoint: "unmatched", status_code: "405" })).toEqual([])
  })

  it("is not in the OpenAPI document", async () => {
    const doc = await (await fetch(`${app.url}/openapi.json`)).text()
    expect(doc).not.toContain("\"405\"")
    expect(doc).not.toContain("Method Not Allowed")
  })
})

describe("405 on the WebSocket upgrade path", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp()
  })
  afterAll(() => app?.close())

  /** An upgrade request on a raw socket; everything the server sent until it closed (the head of a 101). */
  const upgrade = (method: string, path: string) =>
    new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(app.url).port), "127.0.0.1")
      const chunks: Array<Buffer> = []
      socket.on("data", (c: Buffer) => {
        chunks.push(c)
        // An accepted upgrade stays open: its head is all there is to read.
        if (Buffer.concat(chunks).toString("latin1").startsWith("HTTP/1.1 101")) socket.destroy()
      })
      socket.on("error", reject)
      socket.on("close", () => resolve(Buffer.concat(chunks).toString("utf8")))
      socket.write(
        `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
          "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Correlation-ID: upgrade-405\r\nContent-Length: 0\r\n\r\n"
      )
    })

  it("an upgrade to /web with another method than GET is the JSON 405 with Allow, as the HTTP route answers", async () => {
    for (const method of ["POST", "PUT", "DELETE"]) {
      const answer = await upgrade(method, "/web")
      const [head, body] = answer.split("\r\n\r\n")
      expect({ method, status: head!.split("\r\n")[0] }).toEqual({ method, status: "HTTP/1.1 405 Method Not Allowed" })
      expect(head).toMatch(/\r\nAllow: GET, HEAD\r\n/)
      expect(head).toMatch(/\r\nX-Correlation-ID: upgrade-405\r\n/)
      expect(head).toMatch(/\r\nContent-Type: application\/json\r\n/)
      expect(JSON.parse(body!)).toEqual(NOT_ALLOWED)
    }
    // A GET upgrade still opens the WebSocket.
    expect((await upgrade("GET", "/web")).split("\r\n")[0]).toBe("HTTP/1.1 101 Switching Protocols")
  })
})
