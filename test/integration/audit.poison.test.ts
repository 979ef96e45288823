/**
 * Values PostgreSQL would refuse never stop the audit trail, and never answer 500 (docs/audit.md#guarantees,
 * docs/errors-and-limits.md#validation-errors-422): a 3 KB username on a failed login, a 3,000-character path, NUL bytes
 * and escapes that are not UTF-8 — on the embedded database, real PostgreSQL and the Redis Stream.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type AuditItem, awaitAuditRecord } from "../support/AuditTrail.ts"
import { eventually } from "../support/Eventually.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, TEST_REDIS_URL, type TestApp } from "../support/TestApp.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const setups = [
  { name: "embedded", database: "embedded" as const, redis: false },
  ...(TEST_DATABASE_URL !== undefined ? [{ name: "postgres", database: "postgres" as const, redis: false }] : []),
  ...(TEST_DATABASE_URL !== undefined && TEST_REDIS_URL !== undefined
    ? [{ name: "postgres + redis stream", database: "postgres" as const, redis: true }]
    : [])
]

const bytes = (s: string) => Buffer.byteLength(s, "utf8")

describe.each(setups)("poison input ($name)", (setup) => {
  let app: TestApp
  let admin: string

  beforeAll(async () => {
    app = await startTestApp({
      database: setup.database,
      config: {
        // Limited (far above what this file sends): the limiter authenticates every request, so an
        // unmatched path of an authenticated caller is audited too.
        rateLimitPerMinute: 100_000,
        ...(setup.redis ? { redis: Option.some(singleRedis(TEST_REDIS_URL ?? "")), redisKeyPrefix: `test:${randomUUID()}:` } : {})
      }
    })
    admin = (await login(app, "admin")).access_token
  })
  afterAll(() => app.close())

  const records = async (query: string) => {
    const res = await request(app, "GET", `/audit-logs?per_page=100${query}`, { token: admin })
    expect(res.status).toBe(200)
    return (res.body as { items: Array<AuditItem> }).items
  }
  const recordOf = (requestId: string) => awaitAuditRecord(app, admin, requestId)

  it("a failed login with a 3 KB username is audited (truncated) and the records after it still flow", async () => {
    const username = "雨".repeat(1024)
    const res = await request(app, "POST", "/login", { body: { username, password: "x" } })
    expect(res.status).toBe(401)
    expect(res.body).toEqual({ detail: "Invalid credentials" })
    const failed = await recordOf(res.headers.get("x-request-id")!)
    expect(failed.username.startsWith("雨雨雨")).toBe(true)
    expect(failed.username.endsWith("…")).toBe(true)
    expect(bytes(failed.username)).toBeLessThanOrEqual(1024)

    const after = await request(app, "GET", "/authors", { token: admin })
    expect(after.status).toBe(200)
    await recordOf(after.headers.get("x-request-id")!)
  })

  it("a 3,000-character path is audited with its resource truncated; the trail keeps advancing", async () => {
    const res = await request(app, "DELETE", `/authors/${"9".repeat(3000)}`, { token: admin })
    expect(res.status).toBe(422) // not an integer id
    const record = await recordOf(res.headers.get("x-request-id")!)
    expect(record.resource.startsWith("/authors/999")).toBe(true)
    expect(bytes(record.resource)).toBeLessThanOrEqual(1024)
    expect(record.response_status).toBe(422)

    const after = await request(app, "GET", "/authors", { token: admin })
    await recordOf(after.headers.get("x-request-id")!)
  })

  it("NUL or non-UTF-8 escapes in a path or query value: 422 naming the parameter, after authentication; audited", async () => {
    const cases = [
      ["/audit-logs/user/%00", ["path", "user_id"]],
      ["/audit-logs/user/a%00b", ["path", "user_id"]],
      ["/audit-logs/user/a%FFb", ["path", "user_id"]],
      ["/audit-logs?username=%C3%28", ["query", "username"]],
      ["/authors?search=%FF", ["query", "search"]],
      ["/authors?name=a%00", ["query", "name"]],
      ["/authors/paginated?page=1&name=%ED%A0%80", ["query", "name"]]
    ] as const
    const requestIds: Array<string> = []
    for (const [path, loc] of cases) {
      const res = await request(app, "GET", path, { token: admin })
      expect({ path, status: res.status }).toEqual({ path, status: 422 })
      const issues = (res.body as { detail: Array<{ loc: Array<string>; type: string }> }).detail
      expect(issues.map((i) => i.loc)).toContainEqual(loc)
      requestIds.push(res.headers.get("x-request-id")!)

      const anonymous = await request(app, "GET", path)
      expect({ path, status: anonymous.status, body: anonymous.body }).toEqual({ path, status: 401, body: { detail: "Not authenticated" } })
    }
    // A profiling report name is the exception: the documented 400 for an invalid filename wins
    // (profiling.test.ts pins it on GET and DELETE).
    for (const name of ["a%00.html", "a%FF.html"]) {
      const report = await request(app, "GET", `/api/profiling/reports/${name}`)
      expect({ name, status: report.status, body: report.body }).toEqual({ name, status: 400, body: { detail: "Invalid filename" } })
    }
    // UTF-8 that is valid, however unusual, is a value like any other.
    const ok = await request(app, "GET", "/authors?search=%C3%A9%F0%9F%98%80", { token: admin })
    expect(ok.status).toBe(200)
    await eventually(async () => {
      const stored = new Set((await records("&outcome=error")).map((i) => i.request_id))
      return requestIds.every((id) => stored.has(id))
    }, "the audit records of the 422s")
  })
})
