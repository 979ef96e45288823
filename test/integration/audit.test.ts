/**
 * The audit trail at the boundary a user sees (docs/audit.md): what each request records, and
 * the `GET /audit-logs…` endpoints — on the embedded database, real PostgreSQL and (when set)
 * with the Redis Stream buffer.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { request as httpRequest } from "node:http"
import { createServer, connect as tcpConnect } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { untilInFlight } from "../support/Faults.ts"
import { eventually } from "../support/Eventually.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, TEST_REDIS_URL, type TestApp } from "../support/TestApp.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const ADMIN_ID = "00000000-0000-4000-8000-000000000001"
const READER_ID = "00000000-0000-4000-8000-000000000003"
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

type Item = Record<string, unknown> & { id: number; request_id: string; timestamp: string }
type Page = { items: Array<Item>; meta: { page: number; per_page: number; total: number; pages: number } }

/** A record's `timestamp` (UTC, no zone, microseconds) in epoch ms. */
const epochMs = (timestamp: string) => Date.parse(`${timestamp.slice(0, 23)}Z`)

/**
 * A `POST` whose body is sent in two parts: the request has started (its headers are at the
 * server) and stays in flight until `finish` sends the rest.
 */
const splitPost = (url: string, path: string, token: string, body: unknown) => {
  const text = JSON.stringify(body)
  let finish: () => void = () => {}
  const response = new Promise<{ status: number; requestId: string; arrivedAt: number }>((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, {
      method: "POST",
      agent: false,
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(text), authorization: `Bearer ${token}` }
    }, (res) => {
      const arrivedAt = Date.now()
      res.resume()
      res.on("end", () => resolve({ status: res.statusCode ?? 0, requestId: String(res.headers["x-request-id"]), arrivedAt }))
    })
    req.on("error", reject)
    req.write(text.slice(0, 5))
    finish = () => req.end(text.slice(5))
  })
  return { response, finish: () => finish() }
}

const setups = [
  { name: "embedded", database: "embedded" as const, redis: false },
  ...(TEST_DATABASE_URL !== undefined ? [{ name: "postgres", database: "postgres" as const, redis: false }] : []),
  ...(TEST_DATABASE_URL !== undefined && TEST_REDIS_URL !== undefined
    ? [{ name: "postgres + redis stream", database: "postgres" as const, redis: true }]
    : [])
]

describe.each(setups)("audit trail ($name)", (setup) => {
  let app: TestApp
  let admin: string
  let reader: string

  beforeAll(async () => {
    app = await startTestApp({
      database: setup.database,
      config: {
        rateLimitEnabled: false,
        ...(setup.redis ? { redis: Option.some(singleRedis(TEST_REDIS_URL ?? "")), redisKeyPrefix: `test:${randomUUID()}:` } : {})
      }
    })
    admin = (await login(app, "admin")).access_token
    reader = (await login(app, "reader")).access_token
  })
  afterAll(() => app.close())

  const list = async (query: string, token = admin) => {
    const res = await request(app, "GET", `/audit-logs${query}`, { token })
    expect(res.status).toBe(200)
    return res.body as Page
  }
  /** The record of one request, once the writer has stored it. */
  const recordOf = async (requestId: string) => {
    let found: Item | undefined
    await eventually(async () => {
      found = (await list("?per_page=100")).items.find((i) => i.request_id === requestId)
      return found !== undefined
    }, `the audit record of ${requestId}`)
    const detail = await request(app, "GET", `/audit-logs/${found!.id}`, { token: admin })
    expect(detail.status).toBe(200)
    return detail.body as Item
  }

  it("an authenticated request: every field, ids from the response headers", async () => {
    const res = await request(app, "GET", "/authors?search=zz", {
      token: admin,
      headers: { "x-correlation-id": "corr-audit-1", "user-agent": "audit-test/1" }
    })
    expect(res.status).toBe(200)
    const requestId = res.headers.get("x-request-id")!
    expect(requestId).toMatch(UUID)
    const record = await recordOf(requestId)
    expect(record).toEqual({
      id: expect.any(Number),
      timestamp: expect.stringMatching(TIMESTAMP),
      user_id: ADMIN_ID,
      username: "admin",
      user_roles: ["admin", "user", "get-authors", "create-author", "update-author", "delete-author"],
      action_type: "GET",
      resource: "/authors",
      outcome: "success",
      ip_address: "127.0.0.1",
      user_agent: "audit-test/1",
      request_id: requestId,
      correlation_id: "corr-audit-1",
      response_status: 200,
      duration_ms: expect.any(Number),
      request_data: { query: { search: "zz" } },
      error_message: null
    })
  })

  it("403 is permission_denied, 404 and 422 are error with the detail", async () => {
    const denied = await request(app, "POST", "/authors", { token: reader, body: { name: "x" } })
    expect(denied.status).toBe(403)
    const missing = await request(app, "PUT", "/authors/999999", { token: admin, body: { name: "nobody" } })
    const invalid = await request(app, "POST", "/authors", { token: admin, body: { name: "" } })
    expect(missing.status).toBe(404)
    const deniedRecord = await recordOf(denied.headers.get("x-request-id")!)
    expect(deniedRecord).toMatchObject({ outcome: "permission_denied", response_status: 403, user_id: READER_ID, error_message: "Forbidden" })
    const missingRecord = await recordOf(missing.headers.get("x-request-id")!)
    expect(missingRecord).toMatchObject({
      outcome: "error", response_status: 404, action_type: "PUT", resource: "/authors/999999", error_message: "Author with ID 999999 not found"
    })
    const invalidRecord = await recordOf(invalid.headers.get("x-request-id")!)
    expect(invalidRecord).toMatchObject({ outcome: "error", response_status: 422, request_data: { body: { name: "" } } })
  })

  it("timestamp is when the request started, not when it ended", async () => {
    // The request starts, is seen in flight, and only then (a clock tick later) gets the rest of
    // its body: its start is at or before `inFlightAt`, its end after it.
    const sentAt = Date.now()
    const post = splitPost(app.url, "/authors", admin, { name: `Started ${randomUUID()}` })
    await untilInFlight(app.url, 1, post.response)
    const inFlightAt = Date.now()
    await eventually(() => Date.now() > inFlightAt, "the clock to pass the moment the request was seen in flight")
    post.finish()
    const { status, requestId, arrivedAt } = await post.response
    expect(status).toBe(201)
    const record = await recordOf(requestId)
    const started = epochMs(record.timestamp)
    expect(started).toBeGreaterThanOrEqual(sentAt)
    expect(started).toBeLessThanOrEqual(inFlightAt)
    expect(inFlightAt).toBeLessThan(arrivedAt)
  })

  it("login attempts: success names the user, failure keeps the username as sent; never the password", async () => {
    const ok = await request(app, "POST", "/login", { body: { username: "reader", password: "reader" } })
    const bad = await request(app, "POST", "/login", { body: { username: "mallory", password: "hunter2" } })
    expect([ok.status, bad.status]).toEqual([200, 401])
    expect(await recordOf(ok.headers.get("x-request-id")!)).toMatchObject({
      user_id: READER_ID, username: "reader", action_type: "POST", resource: "/login", outcome: "success", response_status: 200,
      request_data: { body: { username: "reader", password: "[REDACTED]" } }
    })
    const failed = await recordOf(bad.headers.get("x-request-id")!)
    expect(failed).toMatchObject({
      user_id: "", username: "mallory", outcome: "error", response_status: 401, error_message: "Invalid credentials"
    })
    expect(JSON.stringify(failed)).not.toContain("hunter2")
  })

  it("secrets are redacted at any depth and in the query; request_data stays within 8 KiB", async () => {
    const res = await request(app, "POST", "/authors?api_key=k1&page=2", {
      token: admin,
      body: {
        name: `Redacted ${randomUUID()}`,
        Password: "p1",
        profile: { nested: { Access_Token: "t1", cards: [{ card_number: "4111", cvv: "123", note: "kept" }] } },
        client_secret: { any: "shape" }
      }
    })
    expect(res.status).toBe(201)
    const record = await recordOf(res.headers.get("x-request-id")!)
    expect(record.request_data).toEqual({
      query: { api_key: "[REDACTED]", page: "2" },
      body: {
        name: expect.any(String),
        Password: "[REDACTED]",
        profile: { nested: { Access_Token: "[REDACTED]", cards: [{ card_number: "[REDACTED]", cvv: "[REDACTED]", note: "kept" }] } },
        client_secret: "[REDACTED]"
      }
    })
    for (const secret of ["k1", "p1", "t1", "4111", "shape"]) expect(JSON.stringify(record)).not.toContain(`"${secret}"`)

    // "Matching" (docs/audit.md#what-is-recorded): a key naming a secret among other words, in any case and spelling,
    // is redacted too; a word that merely contains a secret's name is not.
    const matching = await request(app, "POST", "/authors?X-Api-Key=k2&sessionToken=t2&tokenizer=kept", {
      token: admin,
      body: {
        name: `Matching ${randomUUID()}`,
        user_password: "p2",
        newPassword: "p3",
        account: { apiKey: "k3", "Refresh-Token": "t3", creditCardNumber: "4242", cvv2: "999", SSN_last4: "6789" },
        secretary: "kept",
        classname: "kept"
      }
    })
    expect(matching.status).toBe(201)
    expect((await recordOf(matching.headers.get("x-request-id")!)).request_data).toEqual({
      query: { "X-Api-Key": "[REDACTED]", sessionToken: "[REDACTED]", tokenizer: "kept" },
      body: {
        name: expect.any(String),
        user_password: "[REDACTED]",
        newPassword: "[REDACTED]",
        account: { apiKey: "[REDACTED]", "Refresh-Token": "[REDACTED]", creditCardNumber: "[REDACTED]", cvv2: "[REDACTED]", SSN_last4: "[REDACTED]" },
        secretary: "kept",
        classname: "kept"
      }
    })

    const big = await request(app, "POST", "/authors", { token: admin, body: { name: `Big ${randomUUID()}`, filler: "x".repeat(20_000) } })
    const bigRecord = await recordOf(big.headers.get("x-request-id")!)
    expect(Buffer.byteLength(JSON.stringify(bigRecord.request_data))).toBeLessThanOrEqual(8192)
    expect(bigRecord.request_data).toEqual({ body: { _truncated: true, _bytes: expect.any(Number) } })
  })

  it("a 422 echoes its input to the client, but the record's error_message has the secrets redacted", async () => {
    // A missing name: the issue echoes the whole body as its input (FastAPI's shape).
    const missing = await request(app, "POST", "/authors", {
      token: admin,
      body: { password: "hunter2-missing", profile: { api_key: "k-missing", note: "kept" } }
    })
    expect(missing.status).toBe(422)
    expect(JSON.stringify(missing.body)).toContain("hunter2-missing")
    const missingRecord = await recordOf(missing.headers.get("x-request-id")!)
    expect(missingRecord).toMatchObject({ outcome: "error", response_status: 422 })
    expect(JSON.parse(missingRecord["error_message"] as string)).toEqual([{
      type: "missing",
      loc: ["body", "name"],
      msg: "Field required",
      input: { password: "[REDACTED]", profile: { api_key: "[REDACTED]", note: "kept" } }
    }])
    // Malformed JSON: V8's parse error quotes the text; the record keeps none of it.
    const malformed = await request(app, "POST", "/authors", { token: admin, body: `{"name": "x", "password": hunter2-malformed}` })
    expect(malformed.status).toBe(422)
    const malformedRecord = await recordOf(malformed.headers.get("x-request-id")!)
    expect(JSON.parse(malformedRecord["error_message"] as string)).toEqual([{ type: "json_invalid", loc: ["body", 0], msg: "JSON decode error", input: {} }])
    for (const record of [missingRecord, malformedRecord]) {
      for (const secret of ["hunter2", "k-missing"]) expect(JSON.stringify(record)).not.toContain(secret)
    }
  })

  it("not recorded: requests without a valid token, and the unlimited paths", async () => {
    const anonymous = await request(app, "GET", "/authors")
    const badToken = await request(app, "GET", "/authors", { token: "not-a-jwt" })
    const health = await request(app, "GET", "/health", { token: admin })
    expect([anonymous.status, badToken.status]).toEqual([401, 401])
    // A later request's record proves the writer has passed the earlier ones.
    const marker = await request(app, "GET", "/authors", { token: admin })
    await recordOf(marker.headers.get("x-request-id")!)
    const all = await list("?per_page=100")
    const ids = new Set(all.items.map((i) => i.request_id))
    for (const r of [anonymous, badToken, health]) expect(ids.has(r.headers.get("x-request-id")!)).toBe(false)
    expect(all.items.some((i) => i.resource === "/health")).toBe(false)
  })

  it("filters (exact, AND), inclusive date range, newest first, meta", async () => {
    const marker = await request(app, "GET", "/authors?tag=filters", { token: reader })
    const record = await recordOf(marker.headers.get("x-request-id")!)
    const readerPage = await list(`?user_id=${READER_ID}&per_page=100`)
    expect(readerPage.items.length).toBeGreaterThan(0)
    expect(readerPage.items.every((i) => i.user_id === READER_ID)).toBe(true)
    for (const [key, value] of [["username", "reader"], ["action_type", "GET"], ["resource", "/authors"], ["outcome", "success"]] as const) {
      const page = await list(`?${key}=${encodeURIComponent(value)}&user_id=${READER_ID}&per_page=100`)
      expect(page.items.length).toBeGreaterThan(0)
      expect(page.items.every((i) => i[key] === value && i.user_id === READER_ID)).toBe(true)
      expect(page.meta.total).toBe(page.items.length)
    }
    expect((await list("?username=READER")).meta.total).toBe(0) // exact, not case-insensitive
    // Newest first.
    const all = await list("?per_page=100")
    const stamps = all.items.map((i) => i.timestamp)
    expect([...stamps].sort().reverse()).toEqual(stamps)
    expect(Object.keys(all.items[0]!).sort()).toEqual(
      ["action_type", "duration_ms", "id", "ip_address", "outcome", "request_id", "resource", "response_status", "timestamp", "user_id", "username"]
    )
    // Inclusive on both ends: a range that starts and ends at the record's own timestamp finds it.
    const at = `${record.timestamp.slice(0, 23)}Z`
    const exact = await list(`?start_date=${at}&end_date=${at}&user_id=${READER_ID}`)
    expect(exact.items.map((i) => i.id)).toContain(record.id)
    const day = record.timestamp.slice(0, 10)
    expect((await list(`?start_date=${day}&end_date=${day}&user_id=${READER_ID}`)).items.map((i) => i.id)).toContain(record.id)
    expect((await list(`?end_date=2000-01-01&user_id=${READER_ID}`)).meta.total).toBe(0)
    // Pagination meta.
    const p1 = await list(`?user_id=${READER_ID}&per_page=1&page=1`)
    expect(p1.meta).toMatchObject({ page: 1, per_page: 1, pages: p1.meta.total })
    const past = await list(`?user_id=${READER_ID}&per_page=1&page=1000`)
    expect(past.items).toEqual([])
    expect(past.meta.total).toBe(p1.meta.total)
  })

  it("exact totals (hourly rollup plus partial hours) equal the items a client can page through", async () => {
    const marker = await request(app, "GET", "/authors", { token: admin })
    const record = await recordOf(marker.headers.get("x-request-id")!)
    const at = new Date(`${record.timestamp.slice(0, 23)}Z`).getTime()
    const iso = (ms: number) => new Date(ms).toISOString()
    // Every range ends at the marker, so records written meanwhile (this test's own GETs) stay out.
    const ranges = [`&end_date=${iso(at)}`, `&start_date=${iso(at - 90 * 60_000)}&end_date=${iso(at)}`,
      `&start_date=${iso(at - 26 * 3_600_000)}&end_date=${iso(at)}`, `&start_date=${iso(at)}&end_date=${iso(at)}`,
      `&start_date=${record.timestamp.slice(0, 10)}&end_date=${iso(at)}`]
    for (const filter of ["", "outcome=success", "action_type=GET", "action_type=GET&outcome=success", "outcome=error"]) {
      for (const range of ranges) {
        const query = `?${filter}${range}&per_page=100`
        const first = await list(`${query}&page=1`)
        const seen = [...first.items]
        for (let page = 2; page <= first.meta.pages; page++) seen.push(...(await list(`${query}&page=${page}`)).items)
        expect(first.meta.total, query).toBe(seen.length)
        expect(seen.every((i) => i.timestamp <= record.timestamp), query).toBe(true)
      }
    }
  })

  it("per-user list: the documented reduced item fields, date range", async () => {
    const res = await request(app, "GET", `/audit-logs/user/${READER_ID}?per_page=5`, { token: admin })
    expect(res.status).toBe(200)
    const page = res.body as Page
    expect(page.items.length).toBeGreaterThan(0)
    expect(Object.keys(page.items[0]!).sort()).toEqual(
      ["action_type", "duration_ms", "id", "outcome", "resource", "response_status", "timestamp", "user_id", "username"]
    )
    expect(page.meta).toMatchObject({ page: 1, per_page: 5 })
    const none = await request(app, "GET", `/audit-logs/user/nobody?start_date=2020-01-01`, { token: admin })
    expect(none.body).toMatchObject({ items: [], meta: { total: 0, pages: 0 } })
  })

  it("422 for bad pagination and dates, 404 body, 401 and 403", async () => {
    for (const [query, loc] of [["per_page=0", "per_page"], ["per_page=101", "per_page"], ["page=0", "page"], ["start_date=yesterday", "start_date"],
      ["end_date=2026-02-30", "end_date"], ["start_date=2026-01-01T25:00:00", "start_date"]] as const) {
      const res = await request(app, "GET", `/audit-logs?${query}`, { token: admin })
      expect(res.status, query).toBe(422)
      expect((res.body as { detail: Array<{ loc: Array<string> }> }).detail[0]!.loc).toEqual(["query", loc])
    }
    expect((await request(app, "GET", `/audit-logs/user/x?per_page=101`, { token: admin })).status).toBe(422)
    expect((await list("?per_page=100")).meta.per_page).toBe(100)
    const missing = await request(app, "GET", "/audit-logs/999999999", { token: admin })
    expect(missing).toMatchObject({ status: 404, body: { detail: "Audit log not found" } })
    expect((await request(app, "GET", "/audit-logs/abc", { token: admin })).status).toBe(422)
    expect(await request(app, "GET", "/audit-logs")).toMatchObject({ status: 401, body: { detail: "Not authenticated" } })
    for (const path of ["/audit-logs", "/audit-logs/1", `/audit-logs/user/${READER_ID}`]) {
      expect(await request(app, "GET", path, { token: reader })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
    }
  })

  it("OpenAPI documents the endpoints with 401/403/422/429", async () => {
    const doc = (await request(app, "GET", "/openapi.json")).body as { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> }
    for (const path of ["/audit-logs", "/audit-logs/{log_id}", "/audit-logs/user/{user_id}"]) {
      const responses = doc.paths[path]!["get"]!.responses
      for (const status of ["200", "401", "403", "422", "429"]) expect(Object.keys(responses), `${path} ${status}`).toContain(status)
    }
    expect(Object.keys(doc.paths["/audit-logs/{log_id}"]!["get"]!.responses)).toContain("404")
  })
})

describe("AUDIT_LOG_ENABLED=false", () => {
  it("records nothing; the endpoints still answer", async () => {
    const app = await startTestApp({ config: { rateLimitEnabled: false, auditLogEnabled: false } })
    try {
      const admin = (await login(app, "admin")).access_token
      expect((await request(app, "GET", "/authors", { token: admin })).status).toBe(200)
      const res = await request(app, "GET", "/audit-logs", { token: admin })
      expect(res).toMatchObject({ status: 200, body: { items: [], meta: { total: 0 } } })
    } finally {
      await app.close()
    }
  })
})

describe("ip_address of an IPv4-mapped IPv6 peer", () => {
  let app: TestApp
  beforeAll(async () => {
    // Listening on "::" (dual stack), the server sees the test's IPv4 connections as ::ffff:127.0.0.1.
    app = await startTestApp({ host: "::", config: { rateLimitEnabled: false } })
  })
  afterAll(() => app?.close())

  it("the peer ::ffff:127.0.0.1 is stored and listed as plain IPv4 127.0.0.1", async () => {
    // The premise, on this host: a dual-stack listener reports an IPv4 client as IPv4-mapped IPv6.
    const peer = await new Promise<string | undefined>((resolve, reject) => {
      const server = createServer((socket) => {
        resolve(socket.remoteAddress)
        socket.destroy()
        server.close()
      })
      server.once("error", reject)
      server.listen(0, "::", () => {
        const address = server.address()
        tcpConnect(typeof address === "object" && address !== null ? address.port : 0, "127.0.0.1").on("error", () => {})
      })
    })
    expect(peer).toBe("::ffff:127.0.0.1")

    const admin = (await login(app, "admin")).access_token
    const res = await request(app, "GET", "/authors", { token: admin })
    expect(res.status).toBe(200)
    const requestId = res.headers.get("x-request-id")!
    let item: Item | undefined
    await eventually(async () => {
      const page = await request(app, "GET", "/audit-logs?per_page=100", { token: admin })
      expect(page.status).toBe(200)
      item = (page.body as Page).items.find((i) => i.request_id === requestId)
      return item !== undefined
    }, `the audit record of ${requestId}`)
    expect(item!["ip_address"]).toBe("127.0.0.1")
    const detail = await request(app, "GET", `/audit-logs/${item!.id}`, { token: admin })
    expect(detail.status).toBe(200)
    expect((detail.body as Item)["ip_address"]).toBe("127.0.0.1")
    // The login's record too (no token: the same address, kept for the failed-login trail).
    const logins = await request(app, "GET", "/audit-logs?resource=/login&per_page=100", { token: admin })
    const loginItems = (logins.body as Page).items
    expect(loginItems.length).toBeGreaterThan(0)
    expect(loginItems.every((i) => i["ip_address"] === "127.0.0.1")).toBe(true)
  })
})
