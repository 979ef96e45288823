/**
 * CORS for browser clients (docs/http-api.md#conventions): `CORS_ALLOWED_ORIGINS` answers preflights and adds
 * `Access-Control-Allow-Origin` for the listed origins, exposing the id and rate-limit headers;
 * empty (the default) adds nothing.
 */
import { ConfigProvider, Effect } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { appConfig } from "../../src/Config.ts"
import { login, request, signToken, startTestApp, type TestApp } from "../support/TestApp.ts"

const ALLOWED = "https://app.example"
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const EXPOSED = ["x-correlation-id", "x-request-id", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]

/** The CORS origins as the service reads them from the environment. */
const corsOriginsFrom = async (value: string) =>
  (await Effect.runPromise(
    appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: { CORS_ALLOWED_ORIGINS: value } })))
  )).corsAllowedOrigins

const expectSecurityHeaders = (headers: Headers) => {
  expect(headers.get("x-content-type-options")).toBe("nosniff")
  expect(headers.get("x-frame-options")).toBe("DENY")
  expect(headers.get("referrer-policy")).toBe("no-referrer")
  expect(headers.get("content-security-policy")).toContain("frame-ancestors 'none'")
}

const preflight = (app: TestApp, origin: string) =>
  request(app, "OPTIONS", "/authors", {
    headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" }
  })

describe("CORS_ALLOWED_ORIGINS set", () => {
  let app: TestApp
  let token: string
  beforeAll(async () => {
    app = await startTestApp({ config: { corsAllowedOrigins: [ALLOWED], rateLimitPerMinute: 1000 } })
    token = (await login(app, "reader")).access_token
  })
  afterAll(() => app?.close())

  it("answers a preflight from a listed origin with 204, before authentication and the rate limit", async () => {
    const res = await preflight(app, ALLOWED)
    expect(res.status).toBe(204)
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED)
    expect(res.headers.get("access-control-allow-methods")).toContain("POST")
    expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("authorization")
    // Conditional reads from a script: it may send If-None-Match and read the ETag.
    expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("if-none-match")
    // Trace context from a browser client (Effect's HttpClient sends traceparent and b3 unless told not to).
    expect(res.headers.get("access-control-allow-headers")?.toLowerCase().split(/,\s*/)).toEqual(expect.arrayContaining(["traceparent", "tracestate", "b3"]))
    expect(res.headers.get("access-control-expose-headers")?.toLowerCase()).toContain("etag")
    expect(res.headers.get("vary")).toContain("Origin")
    expect(res.headers.get("x-ratelimit-limit")).toBeNull()
    expect(res.headers.get("x-correlation-id")).toMatch(/^[0-9a-f]{8}$/)
  })

  it("a preflight whose body is over MAX_REQUEST_BODY_BYTES is answered 413 first, as any request is", async () => {
    const res = await request(app, "OPTIONS", "/authors", {
      headers: { origin: ALLOWED, "access-control-request-method": "POST", "content-type": "text/plain" },
      body: "x".repeat(1_048_577)
    })
    expect(res.status).toBe(413)
    expect(res.body).toEqual({ detail: "Request body too large" })
    expect(res.headers.get("access-control-allow-methods")).toBeNull()
    expectSecurityHeaders(res.headers)
    expect(res.headers.get("x-request-id")).toMatch(UUID)
  })

  it("adds the origin and exposes the id and rate-limit headers on responses, errors included", async () => {
    for (const [token_, status] of [[token, 200], [undefined, 401]] as const) {
      const res = await request(app, "GET", "/authors", { headers: { origin: ALLOWED }, ...(token_ === undefined ? {} : { token: token_ }) })
      expect(res.status).toBe(status)
      expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED)
      const exposed = res.headers.get("access-control-expose-headers")?.toLowerCase() ?? ""
      for (const name of ["x-correlation-id", "x-request-id", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]) {
        expect(exposed).toContain(name)
      }
    }
  })

  it("a preflight carries the security headers and its own X-Request-ID (every response)", async () => {
    const first = await preflight(app, ALLOWED)
    const second = await preflight(app, ALLOWED)
    expect([first.status, second.status]).toEqual([204, 204])
    for (const res of [first, second]) {
      expectSecurityHeaders(res.headers)
      expect(res.headers.get("x-request-id")).toMatch(UUID)
    }
    expect(first.headers.get("x-request-id")).not.toBe(second.headers.get("x-request-id"))
  })

  it("adds nothing for an origin not listed, and its preflight is not answered", async () => {
    const res = await request(app, "GET", "/authors", { token, headers: { origin: "https://evil.example" } })
    expect(res.status).toBe(200)
    expect(res.headers.get("access-control-allow-origin")).toBeNull()
    const pre = await preflight(app, "https://evil.example")
    expect(pre.status).not.toBe(204)
    expect(pre.headers.get("access-control-allow-origin")).toBeNull()
  })

  it("an OPTIONS that is not a preflight (or from an origin not listed) is the route's 405, with the CORS headers it earns", async () => {
    const plain = await request(app, "OPTIONS", "/authors", { headers: { origin: ALLOWED } })
    expect(plain).toMatchObject({ status: 405, body: { detail: "Method Not Allowed" } })
    expect(plain.headers.get("allow")).toBe("GET, HEAD, POST")
    expect(plain.headers.get("access-control-allow-origin")).toBe(ALLOWED)
    const refused = await preflight(app, "https://evil.example")
    expect(refused).toMatchObject({ status: 405, body: { detail: "Method Not Allowed" } })
    expect(refused.headers.get("access-control-allow-origin")).toBeNull()
  })
})

describe("CORS_ALLOWED_ORIGINS=*", () => {
  let app: TestApp
  beforeAll(async () => {
    const origins = await corsOriginsFrom("*")
    expect(origins).toEqual(["*"])
    // A small budget, so a 429 is a few requests away (each test has its own token subject).
    app = await startTestApp({ config: { corsAllowedOrigins: origins, rateLimitEnabled: true, rateLimitPerMinute: 2, rateLimitBurst: 0 } })
  })
  afterAll(() => app?.close())

  const reader = () => signToken(app, { sub: `cors-${randomUUID()}`, roles: ["get-authors"] })

  it("every origin is allowed: Access-Control-Allow-Origin names the request's origin, with Vary: Origin and the exposed headers", async () => {
    const token = await reader()
    for (const origin of ["https://one.example", "http://localhost:5173"]) {
      const res = await request(app, "GET", "/authors", { token, headers: { origin } })
      expect(res.status).toBe(200)
      expect(res.headers.get("access-control-allow-origin")).toBe(origin)
      expect(res.headers.get("vary")).toContain("Origin")
      const exposed = res.headers.get("access-control-expose-headers")?.toLowerCase() ?? ""
      for (const name of EXPOSED) expect(exposed).toContain(name)
      // Bearer tokens, not cookies: no credentials mode.
      expect(res.headers.get("access-control-allow-credentials")).toBeNull()
    }
  })

  it("answers the preflight of any origin with 204, before authentication and the rate limit", async () => {
    for (const origin of ["https://two.example", "https://three.example"]) {
      const res = await preflight(app, origin)
      expect(res.status).toBe(204)
      expect(res.headers.get("access-control-allow-origin")).toBe(origin)
      expect(res.headers.get("access-control-allow-methods")).toContain("POST")
      expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("authorization")
      expect(res.headers.get("x-ratelimit-limit")).toBeNull()
    }
  })

  it("a request without Origin gets no CORS header", async () => {
    const res = await request(app, "GET", "/authors", { token: await reader() })
    expect(res.status).toBe(200)
    expect(res.headers.get("access-control-allow-origin")).toBeNull()
  })

  it("a 429 carries the CORS headers, exposing the id and rate-limit headers to the browser", async () => {
    const token = await reader()
    const origin = "https://limited.example"
    const statuses: Array<number> = []
    let limited: Awaited<ReturnType<typeof request>> | undefined
    for (let i = 0; i < 3; i++) {
      const res = await request(app, "GET", "/authors", { token, headers: { origin } })
      statuses.push(res.status)
      if (res.status === 429) limited = res
    }
    expect(statuses).toEqual([200, 200, 429])
    expect(limited!.body).toEqual({ detail: "Rate limit exceeded" })
    expect(limited!.headers.get("access-control-allow-origin")).toBe(origin)
    expect(limited!.headers.get("vary")).toContain("Origin")
    const exposed = limited!.headers.get("access-control-expose-headers")?.toLowerCase() ?? ""
    for (const name of EXPOSED) expect(exposed).toContain(name)
    expect(limited!.headers.get("x-ratelimit-remaining")).toBe("0")
    expect(Number(limited!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
  })
})

describe("CORS_ALLOWED_ORIGINS empty (default)", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp()
  })
  afterAll(() => app?.close())

  it("adds no CORS header and answers no preflight", async () => {
    const res = await request(app, "GET", "/health", { headers: { origin: ALLOWED } })
    expect(res.headers.get("access-control-allow-origin")).toBeNull()
    const pre = await preflight(app, ALLOWED)
    expect(pre.status).not.toBe(204)
    expect(pre.headers.get("access-control-allow-origin")).toBeNull()
  })
})
