/**
 * CORS for browser clients (CONTRACT §9): `CORS_ALLOWED_ORIGINS` answers preflights and adds
 * `Access-Control-Allow-Origin` for the listed origins, exposing the id and rate-limit headers;
 * empty (the default) adds nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"

const ALLOWED = "https://app.example"

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
    expect(res.headers.get("vary")).toContain("Origin")
    expect(res.headers.get("x-ratelimit-limit")).toBeNull()
    expect(res.headers.get("x-correlation-id")).toMatch(/^[0-9a-f]{8}$/)
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

  it("adds nothing for an origin not listed, and its preflight is not answered", async () => {
    const res = await request(app, "GET", "/authors", { token, headers: { origin: "https://evil.example" } })
    expect(res.status).toBe(200)
    expect(res.headers.get("access-control-allow-origin")).toBeNull()
    const pre = await preflight(app, "https://evil.example")
    expect(pre.status).not.toBe(204)
    expect(pre.headers.get("access-control-allow-origin")).toBeNull()
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
