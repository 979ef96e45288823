/**
 * The HTTP rate limit at the boundary (docs/errors-and-limits.md#http-rate-limit): headers, 429 + Retry-After, keys (user
 * with a valid token, else IP; X-Forwarded-For only from TRUSTED_PROXIES), unlimited paths, the
 * metric — in process and on Redis — plus Redis concurrency, two instances sharing one budget,
 * and a Redis outage in each RATE_LIMIT_FAIL_MODE (a TCP proxy in front of the shared Redis).
 */
import { Option, Result } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AppConfigShape } from "../../src/Config.ts"
import { parseCidrList } from "../../src/Domain/Cidr.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { eventually } from "../support/Eventually.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { request, signToken, startTestApp, TEST_REDIS_URL, type TestApp } from "../support/TestApp.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const small = { rateLimitEnabled: true, rateLimitPerMinute: 5, rateLimitBurst: 2 } satisfies Partial<AppConfigShape>
const redisConfig = (prefix = `test:${randomUUID()}:`, url = TEST_REDIS_URL ?? "") =>
  ({ redis: Option.some(singleRedis(url)), redisKeyPrefix: prefix }) satisfies Partial<AppConfigShape>

const stores = [
  { name: "in-process", config: {} },
  ...(TEST_REDIS_URL !== undefined ? [{ name: "Redis", config: "redis" as const }] : [])
]

describe.each(stores)("HTTP rate limit ($name)", ({ config }) => {
  let app: TestApp
  beforeAll(async () => {
    const trusted = Result.getOrThrow(parseCidrList("10.0.0.0/8"))
    app = await startTestApp({ config: { ...small, trustedProxies: trusted, ...(config === "redis" ? redisConfig() : {}) } })
  })
  afterAll(() => app.close())

  it("limit + burst admitted with headers 6…0, then 429 with Retry-After and the same headers", async () => {
    const token = await signToken(app, { sub: `u-${randomUUID()}`, roles: ["get-authors"] })
    const before = (await scrapeMetrics(app.url)).firstOrZero("rate_limit_hits_total", { limit_type: "http" })
    const seen: Array<[number, string | null, string | null, string | null]> = []
    for (let i = 0; i < 8; i++) {
      const res = await request(app, "GET", "/authors", { token })
      seen.push([res.status, res.headers.get("x-ratelimit-limit"), res.headers.get("x-ratelimit-remaining"), res.headers.get("x-ratelimit-reset")])
      if (i === 7) {
        expect(res.body).toEqual({ detail: "Rate limit exceeded" })
        expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(59)
        expect(res.headers.get("x-correlation-id")).toMatch(/^[0-9a-f]{8}$/)
      }
    }
    expect(seen.map((s) => s[0])).toEqual([200, 200, 200, 200, 200, 200, 200, 429])
    expect(seen.map((s) => s[1])).toEqual(Array(8).fill("7"))
    expect(seen.map((s) => s[2])).toEqual(["6", "5", "4", "3", "2", "1", "0", "0"])
    expect(seen.every((s) => Number(s[3]) >= 59 && Number(s[3]) <= 60)).toBe(true)
    expect((await scrapeMetrics(app.url)).firstOrZero("rate_limit_hits_total", { limit_type: "http" })).toBe(before + 1)
  })

  it("rejected requests count too; errors are limited like successes (check order: 429 before 401/403/422)", async () => {
    const token = await signToken(app, { sub: `u-${randomUUID()}`, roles: [] })
    const statuses: Array<number> = []
    for (let i = 0; i < 8; i++) statuses.push((await request(app, "GET", "/authors", { token })).status)
    expect(statuses).toEqual([403, 403, 403, 403, 403, 403, 403, 429])
  })

  it("per user: each token's subject has its own budget; without a valid token, the IP's", async () => {
    const a = await signToken(app, { sub: `a-${randomUUID()}`, roles: ["get-authors"] })
    const b = await signToken(app, { sub: `b-${randomUUID()}`, roles: ["get-authors"] })
    for (let i = 0; i < 7; i++) expect((await request(app, "GET", "/authors", { token: a })).status).toBe(200)
    expect((await request(app, "GET", "/authors", { token: a })).status).toBe(429)
    expect((await request(app, "GET", "/authors", { token: b })).status).toBe(200)
  })

  it("without a valid token the client IP is the key; X-Forwarded-For is ignored from an untrusted peer", async () => {
    // The loopback peer is not in 10.0.0.0/8: every forwarded address below is the same client.
    const statuses: Array<number> = []
    for (let i = 0; i < 8; i++) {
      const headers = { "x-forwarded-for": `198.51.100.${i}` }
      const res = i % 3 === 0
        ? await request(app, "POST", "/login", { body: { username: "nobody", password: "x" }, headers })
        : await request(app, "GET", "/authors", i % 3 === 1 ? { token: "garbage", headers } : { headers })
      statuses.push(res.status)
    }
    expect(statuses).toEqual([401, 401, 401, 401, 401, 401, 401, 429])
  })

  it("unlimited paths carry no rate-limit headers and are never refused", async () => {
    for (let i = 0; i < 12; i++) {
      for (const path of ["/health", "/livez", "/readyz", "/metrics", "/openapi.json", "/docs", "/redoc", "/asyncapi.json", "/proto/websocket.proto"]) {
        const res = await request(app, "GET", path)
        expect(res.status).not.toBe(429)
        expect(res.headers.get("x-ratelimit-limit")).toBeNull()
      }
    }
  })
})

describe.each(stores)("X-RateLimit-* headers on limited error responses ($name)", ({ config }) => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp({ config: { ...small, ...(config === "redis" ? redisConfig() : {}) } })
  })
  afterAll(() => app.close())

  /** Status, body and the three headers, with what the budget should say after this request. */
  const limited = async (res: Awaited<ReturnType<typeof request>>, status: number, remaining: number) => {
    expect(res.status).toBe(status)
    if (status >= 400) expect(res.body).toHaveProperty("detail")
    expect(res.headers.get("x-ratelimit-limit")).toBe("7")
    expect(res.headers.get("x-ratelimit-remaining")).toBe(String(remaining))
    // Whole seconds until the oldest admitted request leaves the 60 s window: there is one (this one).
    const reset = Number(res.headers.get("x-ratelimit-reset"))
    expect(Number.isInteger(reset) && reset >= 1 && reset <= 60, `X-RateLimit-Reset ${reset}`).toBe(true)
  }

  it("401 (no token, bad token: the IP's budget), 403, 404 (author, unknown route), 422 and 409 (the user's budget) all carry them", async () => {
    await limited(await request(app, "GET", "/authors"), 401, 6)
    await limited(await request(app, "GET", "/authors", { token: "not-a-jwt" }), 401, 5)
    const token = await signToken(app, { sub: `e-${randomUUID()}`, roles: ["get-authors", "create-author", "update-author"] })
    await limited(await request(app, "DELETE", "/authors/1", { token }), 403, 6)
    const missing = await request(app, "PUT", "/authors/999999999", { token, body: { name: `Nobody ${randomUUID()}` } })
    await limited(missing, 404, 5)
    expect(missing.body).toEqual({ detail: "Author with ID 999999999 not found" })
    const unknown = await request(app, "GET", "/no-such-route", { token })
    await limited(unknown, 404, 4)
    expect(unknown.body).toEqual({ detail: "Not Found" })
    const invalid = await request(app, "PUT", "/authors/not-a-number", { token, body: { name: "x" } })
    await limited(invalid, 422, 3)
    expect((invalid.body as { detail: Array<{ loc: Array<string> }> }).detail[0]!.loc).toEqual(["path", "author_id"])
    const name = `Limited ${randomUUID()}`
    await limited(await request(app, "POST", "/authors", { token, body: { name } }), 201, 2)
    await limited(await request(app, "POST", "/authors", { token, body: { name } }), 409, 1)
  })
})

describe("X-Forwarded-For from a trusted proxy", () => {
  it("each forwarded client has its own budget", async () => {
    const app = await startTestApp({ config: { ...small, trustedProxies: Result.getOrThrow(parseCidrList("127.0.0.1/32")) } })
    try {
      const hit = (ip: string) => request(app, "POST", "/login", { body: { username: "nobody", password: "x" }, headers: { "x-forwarded-for": ip } })
      for (let i = 0; i < 7; i++) expect((await hit("198.51.100.1")).status).toBe(401)
      expect((await hit("198.51.100.1")).status).toBe(429)
      expect((await hit("198.51.100.2")).status).toBe(401)
    } finally {
      await app.close()
    }
  })
})

describe.runIf(TEST_REDIS_URL !== undefined)("HTTP rate limit on Redis, across instances", () => {
  it("200 concurrent requests admit exactly the limit; two instances share one budget", async () => {
    const prefix = `test:${randomUUID()}:`
    const config = { rateLimitEnabled: true, rateLimitPerMinute: 40, rateLimitBurst: 10, ...redisConfig(prefix) }
    const one = await startTestApp({ config })
    const two = await startTestApp({ config })
    try {
      const token = await signToken(one, { sub: `c-${randomUUID()}`, roles: [] }) // a 403 needs no database
      const results = await Promise.all(Array.from({ length: 200 }, () => request(one, "GET", "/authors", { token })))
      expect(results.filter((r) => r.status !== 429)).toHaveLength(50)
      // Anonymous clients on loopback: one IP, one budget, whichever instance answers.
      const split = await Promise.all(Array.from({ length: 120 }, (_, i) => request(i % 2 === 0 ? one : two, "GET", "/authors")))
      expect(split.filter((r) => r.status !== 429)).toHaveLength(50)
    } finally {
      await one.close()
      await two.close()
    }
  })

  it.each(["open", "closed"] as const)("Redis stopped mid-test: fail %s, never 500; recovers when Redis returns", async (mode) => {
    const { host, port } = hostPort(TEST_REDIS_URL ?? "")
    const proxy = await startTcpProxy(host, port)
    const app = await startTestApp({ config: { ...small, rateLimitFailMode: mode, ...redisConfig(undefined, viaProxy(TEST_REDIS_URL ?? "", proxy)) } })
    try {
      const token = await signToken(app, { sub: `f-${randomUUID()}`, roles: [] })
      const before = (await scrapeMetrics(app.url)).firstOrZero("rate_limit_store_errors_total", { limit_type: "http" })
      expect((await request(app, "GET", "/authors", { token })).headers.get("x-ratelimit-remaining")).toBe("6")
      await proxy.cut()
      for (let i = 0; i < 10; i++) {
        const res = await request(app, "GET", "/authors", { token })
        expect(res.status).toBe(mode === "open" ? 403 : 429)
        if (mode === "closed") {
          // Refused as if the window were full: the 429 of docs/errors-and-limits.md#http-rate-limit, with its headers.
          expect(res.body).toEqual({ detail: "Rate limit exceeded" })
          expect(res.headers.get("x-ratelimit-limit")).toBe("7")
          expect(res.headers.get("x-ratelimit-remaining")).toBe("0")
          const reset = Number(res.headers.get("x-ratelimit-reset"))
          expect(Number.isInteger(reset) && reset >= 0 && reset <= 60, `X-RateLimit-Reset ${reset}`).toBe(true)
          expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
          expect(res.headers.get("x-request-id")).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
          expect(res.headers.get("x-correlation-id")).toMatch(/^[0-9a-f]{8}$/)
        }
      }
      expect((await scrapeMetrics(app.url)).firstOrZero("rate_limit_store_errors_total", { limit_type: "http" })).toBeGreaterThanOrEqual(before + 10)
      await proxy.restore()
      // Back: the budget in Redis is the one from before the outage (one admitted, then the first probe that got through).
      await eventually(async () => {
        const remaining = (await request(app, "GET", "/authors", { token })).headers.get("x-ratelimit-remaining")
        return remaining !== null && remaining !== "0"
      }, "Redis back")
      const res = await request(app, "GET", "/authors", { token })
      expect(res.status).toBe(403)
      expect(res.headers.get("x-ratelimit-remaining")).toBe("4")
    } finally {
      await app.close()
      await proxy.close()
    }
  })
})
