/**
 * Conditional reads (docs/http-api.md#conditional-reads): every 200 of `GET /authors`, `GET /authors/paginated` and
 * `GET /authors/{author_id}` carries an `ETag`; a matching `If-None-Match` gets 304 without a body,
 * still rate limited and audited (`response_status` 304). The ETag of an answer sent whole is
 * strong and comes from its body (the same on every instance); a list streamed in batches has a
 * weak one, which stops matching after a write. WebSocket answers are unaffected.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { awaitAuditRecord } from "../support/AuditTrail.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, TEST_REDIS_URL, type TestApp } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const STRONG = /^"[A-Za-z0-9_-]{27}"$/
const WEAK = /^W\/"[^"]+"$/

/** The raw response: status, headers, body text (a 304 must have none). */
const get = async (app: TestApp, path: string, token: string, headers: Record<string, string> = {}) => {
  const res = await fetch(`${app.url}${path}`, { headers: { authorization: `Bearer ${token}`, ...headers } })
  return { status: res.status, headers: res.headers, text: await res.text() }
}

describe("conditional reads", () => {
  let app: TestApp
  let admin: string
  let id: number

  beforeAll(async () => {
    app = await startTestApp({ config: { rateLimitEnabled: true, rateLimitPerMinute: 100_000 } })
    admin = (await login(app, "admin")).access_token
    id = ((await request(app, "POST", "/authors", { token: admin, body: { name: `Etag ${randomUUID()}` } })).body as { id: number }).id
  })
  afterAll(() => app?.close())

  const paths = () => [`/authors/${id}`, `/authors?id=${id}`, `/authors/paginated?id=${id}`, "/authors/paginated?per_page=5"]

  it("every 200 carries a strong ETag from its body; a matching If-None-Match gets 304 with no body, the ETag and the rate-limit headers", async () => {
    for (const path of paths()) {
      const first = await get(app, path, admin)
      expect(first.status, path).toBe(200)
      const etag = first.headers.get("etag")!
      expect(etag, path).toMatch(STRONG)
      expect((await get(app, path, admin)).headers.get("etag"), path).toBe(etag)
      for (const header of [etag, `W/${etag}`, `"other", ${etag}`, "*"]) {
        const again = await get(app, path, admin, { "if-none-match": header })
        expect(again.status, `${path} ${header}`).toBe(304)
        expect(again.text, path).toBe("")
        expect(again.headers.get("etag"), path).toBe(etag)
        expect(again.headers.get("x-ratelimit-limit"), path).toBe("100010")
        expect(again.headers.get("x-request-id"), path).toBeTruthy()
      }
      const other = await get(app, path, admin, { "if-none-match": "\"something else\"" })
      expect(other.status, path).toBe(200)
      expect(other.text, path).toBe(first.text)
    }
  })

  it("a 304 is audited with response_status 304", async () => {
    const { headers } = await get(app, `/authors/${id}`, admin)
    const res = await get(app, `/authors/${id}`, admin, { "if-none-match": headers.get("etag")! })
    expect(res.status).toBe(304)
    const record = await awaitAuditRecord(app, admin, res.headers.get("x-request-id")!)
    expect(record).toMatchObject({ action_type: "GET", resource: `/authors/${id}`, response_status: 304, outcome: "success" })
  })

  it("after a write the ETag changes: the old one gets the new body", async () => {
    const before = await Promise.all(paths().map((path) => get(app, path, admin)))
    expect((await request(app, "PUT", `/authors/${id}`, { token: admin, body: { name: `Etag renamed ${randomUUID()}` } })).status).toBe(200)
    for (const [i, path] of paths().entries()) {
      const after = await get(app, path, admin, { "if-none-match": before[i]!.headers.get("etag")! })
      expect(after.status, path).toBe(200)
      expect(after.text, path).toContain("Etag renamed")
      expect(after.headers.get("etag"), path).not.toBe(before[i]!.headers.get("etag"))
    }
  })

  it("no ETag on a 404, and a 304 is never given to a request that fails first (401)", async () => {
    const missing = await get(app, "/authors/987654321", admin)
    expect(missing.status).toBe(404)
    expect(missing.headers.get("etag")).toBeNull()
    const unauthenticated = await fetch(`${app.url}/authors/${id}`, { headers: { "if-none-match": "*" } })
    expect(unauthenticated.status).toBe(401)
  })

  it("WebSocket answers are unaffected: the same envelope, no tag", async () => {
    const ws = connectWs(app.url, { token: admin })
    try {
      const reply = await ws.request(2, { page: 1, per_page: 5, filters: { id } })
      expect(Object.keys(reply).sort()).toEqual(["data", "meta", "pkg_id", "req_id", "status_code"])
      expect(reply.status_code).toBe(0)
      expect((reply.data as Array<{ id: number }>).map((a) => a.id)).toEqual([id])
    } finally {
      await ws.close()
    }
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined && TEST_REDIS_URL !== undefined)("conditional reads of a list streamed in batches, and across instances", () => {
  let a: TestApp
  let b: TestApp
  let off: TestApp
  let onA: string
  let onB: string
  let onOff: string
  const prefix = `test-conditional-${randomUUID()}:`

  beforeAll(async () => {
    const redis = { redis: Option.some(singleRedis(TEST_REDIS_URL ?? "")), redisKeyPrefix: prefix }
    const config = { rateLimitEnabled: true, rateLimitPerMinute: 100_000, ...redis }
    a = await startTestApp({ database: "postgres", config })
    b = await startTestApp({ database: "postgres", databaseUrl: a.databaseUrl!, config })
    off = await startTestApp({ database: "postgres", databaseUrl: a.databaseUrl!, config: { ...config, readCacheMaxBytes: 0 } })
    onA = (await login(a, "admin")).access_token
    onB = (await login(b, "reader")).access_token
    onOff = (await login(off, "reader")).access_token
    const client = new pg.Client({ connectionString: a.databaseUrl })
    await client.connect()
    try {
      await client.query("INSERT INTO authors (name) SELECT 'Streamed ' || g FROM generate_series(1, 1500) AS g")
    } finally {
      await client.end()
    }
  })
  afterAll(async () => {
    await off?.close()
    await b?.close()
    await a?.close()
  })

  it("the same body has the same strong ETag on every instance", async () => {
    const onEach = await Promise.all([get(a, "/authors/paginated?per_page=7", onA), get(b, "/authors/paginated?per_page=7", onB), get(off, "/authors/paginated?per_page=7", onOff)])
    expect(onEach.map((r) => r.text)).toEqual([onEach[0]!.text, onEach[0]!.text, onEach[0]!.text])
    expect(onEach.map((r) => r.headers.get("etag"))).toEqual([onEach[0]!.headers.get("etag"), onEach[0]!.headers.get("etag"), onEach[0]!.headers.get("etag")])
    const notModified = await get(b, "/authors/paginated?per_page=7", onB, { "if-none-match": onEach[0]!.headers.get("etag")! })
    expect(notModified.status).toBe(304)
  })

  it("a streamed list has a weak ETag: 304 while nothing changed, 200 with a new one after a write", async () => {
    const first = await get(b, "/authors", onB)
    expect(first.status).toBe(200)
    expect((JSON.parse(first.text) as Array<unknown>).length).toBeGreaterThanOrEqual(1500)
    const etag = first.headers.get("etag")!
    expect(etag).toMatch(WEAK)
    const same = await get(b, "/authors", onB, { "if-none-match": etag })
    expect(same.status).toBe(304)
    expect(same.text).toBe("")
    expect((await request(a, "POST", "/authors", { token: onA, body: { name: `Streamed new ${randomUUID()}` } })).status).toBe(201)
    const changed = await get(b, "/authors", onB, { "if-none-match": etag })
    expect(changed.status).toBe(200)
    expect(changed.text).toContain("Streamed new")
    expect(changed.headers.get("etag")).toMatch(WEAK)
    expect(changed.headers.get("etag")).not.toBe(etag)
  })

  it("with the cache off a streamed list's weak ETag never matches (nothing tells it is still current)", async () => {
    const first = await get(off, "/authors", onOff)
    expect(first.headers.get("etag")).toMatch(WEAK)
    const again = await get(off, "/authors", onOff, { "if-none-match": first.headers.get("etag")! })
    expect(again.status).toBe(200)
    expect(again.text).toBe(first.text)
  })
})
