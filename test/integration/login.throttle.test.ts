/**
 * docs/errors-and-limits.md#failed-logins: repeated failures for one username slow further attempts for it
 * from any IP and on any instance — 429 `Too many failed login attempts` with `Retry-After`,
 * without the password being checked — and the owner can log in again once the window has
 * passed. The attempts are audited (outcome error, 429) and counted like every HTTP 429
 * (`rate_limit_hits_total{limit_type="http"}`, docs/operations.md#metrics--get-metrics). On the in-process store, and on Redis
 * with two instances sharing it, in each Redis mode the run offers (one server, a Redis Cluster, a
 * Sentinel group: test/support/RedisModes.ts).
 *
 * The window is 5 s here, so "after the window" is reached by polling (test/support/Eventually.ts), not by sleeping
 * for the Retry-After.
 */
import { Option, Result } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AppConfigShape } from "../../src/Config.ts"
import { parseCidrList } from "../../src/Domain/Cidr.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { eventually } from "../support/Eventually.ts"
import { redisModes } from "../support/RedisModes.ts"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"

const MAX_FAILURES = 3
// Long enough that the failures and the check after them fit in it on a loaded CI machine.
const WINDOW_SECONDS = 5
const DETAIL = { detail: "Too many failed login attempts" }

const throttled: Partial<AppConfigShape> = {
  loginMaxFailures: MAX_FAILURES,
  loginFailureWindowSeconds: WINDOW_SECONDS,
  // The per-IP limit stays on (high enough that the admin's audit polling never meets it: CI saw a
  // 429 there); X-Forwarded-For from loopback names the client, so each attempt below comes from
  // its own address.
  rateLimitEnabled: true,
  rateLimitPerMinute: 10_000,
  trustedProxies: Result.getOrThrow(parseCidrList("127.0.0.1/32"))
}

const attempt = (app: TestApp, username: string, password: string, ip = `203.0.113.${Math.floor(Math.random() * 250) + 1}`) =>
  request(app, "POST", "/login", { body: { username, password }, headers: { "x-forwarded-for": ip } })

/** `rate_limit_hits_total{limit_type="http"}` (the registry is per process: both instances' hits). */
const httpRateLimitHits = async (app: TestApp) => (await scrapeMetrics(app.url)).firstOrZero("rate_limit_hits_total", { limit_type: "http" })

interface AuditRecord {
  readonly request_id: string
  readonly username: string
  readonly outcome: string
  readonly response_status: number
  readonly ip_address: string
  readonly error_message: string | null
  readonly request_data: unknown
}

/**
 * The audit record of one request, from whichever instance stored it: the instances share Redis —
 * and so the audit stream, whose entries the writing instance stores and another one's start or
 * recovery scan may store too — but each test instance has its own database (in production they
 * share one).
 */
const auditRecord = async (admins: ReadonlyArray<readonly [TestApp, string]>, requestId: string, username: string) => {
  let found: AuditRecord | undefined
  await eventually(async () => {
    for (const [app, admin] of admins) {
      const res = await request(app, "GET", `/audit-logs?per_page=100&username=${encodeURIComponent(username)}`, { token: admin })
      expect(res.status).toBe(200)
      const item = (res.body as { items: Array<{ id: number; request_id: string }> }).items.find((i) => i.request_id === requestId)
      if (item !== undefined) {
        found = (await request(app, "GET", `/audit-logs/${item.id}`, { token: admin })).body as AuditRecord
        return true
      }
    }
    return false
  }, `the audit record of ${requestId}`)
  return found!
}

const suite = (name: string, config: () => Partial<AppConfigShape>, instances: 1 | 2) =>
  describe(`failed-login slowing: ${name}`, () => {
    let one: TestApp
    let two: TestApp
    /** Each instance with an admin token of its own (each test instance has its own built-in provider and database). */
    let admins: ReadonlyArray<readonly [TestApp, string]>

    beforeAll(async () => {
      const shared = config()
      one = await startTestApp({ config: { ...throttled, ...shared } })
      two = instances === 2 ? await startTestApp({ config: { ...throttled, ...shared } }) : one
      admins = await Promise.all([...new Set([one, two])].map(async (app) => [app, (await login(app, "admin")).access_token] as const))
    })
    afterAll(async () => {
      await one?.close()
      if (two !== one) await two?.close()
    })

    it("failures for one username from many IPs lock it everywhere, without checking the password; others are unaffected", async () => {
      const failures = await Promise.all(
        Array.from({ length: MAX_FAILURES }, (_, i) => attempt(i % 2 === 0 ? one : two, "editor", "wrong", `198.51.100.${i + 1}`))
      )
      expect(failures.map((r) => r.status)).toEqual(Array(MAX_FAILURES).fill(401))

      // The right password, from an address that never failed, on the other instance: refused unchecked.
      const locked = await attempt(two, "editor", "editor", "192.0.2.77")
      expect(locked).toMatchObject({ status: 429, body: DETAIL })
      const retryAfter = Number(locked.headers.get("retry-after"))
      expect(Number.isInteger(retryAfter)).toBe(true)
      expect(retryAfter).toBeGreaterThanOrEqual(1)
      expect(retryAfter).toBeLessThanOrEqual(WINDOW_SECONDS)
      // Usernames are counted case-insensitively.
      expect(await attempt(one, "EDITOR", "whatever", "192.0.2.78")).toMatchObject({ status: 429, body: DETAIL })
      // Another user is unaffected, from the same address.
      expect((await attempt(two, "reader", "reader", "192.0.2.77")).status).toBe(200)

      // Audited like every attempt: username as sent, outcome error, 429, never the password.
      const record = await auditRecord(admins, locked.headers.get("x-request-id")!, "editor")
      expect(record).toMatchObject({
        username: "editor",
        outcome: "error",
        response_status: 429,
        ip_address: "192.0.2.77",
        error_message: DETAIL.detail,
        request_data: { body: { username: "editor", password: "[REDACTED]" } }
      })

      // After the window the owner logs in again, on either instance; until then every attempt is the 429.
      const refusals: Array<unknown> = []
      let i = 0
      await eventually(async () => {
        const res = await attempt(i++ % 2 === 0 ? one : two, "editor", "editor", "192.0.2.79")
        if (res.status === 200) return true
        refusals.push({ status: res.status, body: res.body })
        return false
      }, "the window to pass")
      for (const refusal of refusals) expect(refusal).toEqual({ status: 429, body: DETAIL })
    })

    it("concurrent guesses spread over addresses and instances get no more than the budget; each refusal is a counted 429", async () => {
      const username = `guess-target-${randomUUID()}`
      const hitsBefore = await httpRateLimitHits(one)
      const results = await Promise.all(
        Array.from({ length: 24 }, (_, i) => attempt(i % 2 === 0 ? one : two, username, `guess-${i}`, `198.18.0.${i + 1}`))
      )
      expect(results.filter((r) => r.status === 401)).toHaveLength(MAX_FAILURES)
      const refused = results.filter((r) => r.status === 429)
      expect(refused).toHaveLength(24 - MAX_FAILURES)
      for (const r of refused) {
        expect(r.body).toEqual(DETAIL)
        expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      }
      expect(await httpRateLimitHits(one)).toBe(hitsBefore + refused.length)
    })

    // Failures are counted in the window, not failures since the last success: were a
    // success to wipe them, an account that logs in often (a script, a service account) would hand
    // a guesser a fresh budget after each of its logins.
    it("a successful login does not wipe the failures before it", async () => {
      for (let i = 0; i < MAX_FAILURES - 1; i++) expect((await attempt(i % 2 === 0 ? one : two, "reader", `nope-${i}`)).status).toBe(401)
      expect((await attempt(one, "reader", "reader")).status).toBe(200)
      expect((await attempt(two, "reader", "nope-last")).status).toBe(401)
      expect(await attempt(one, "reader", "reader")).toMatchObject({ status: 429, body: DETAIL })
    })

    it("successful logins do not use the budget", async () => {
      for (let i = 0; i < MAX_FAILURES + 2; i++) expect((await attempt(i % 2 === 0 ? one : two, "admin", "admin")).status).toBe(200)
      for (let i = 0; i < MAX_FAILURES - 1; i++) expect((await attempt(one, "admin", "nope")).status).toBe(401)
      expect((await attempt(two, "admin", "admin")).status).toBe(200)
    })
  })

suite("in-process store", () => ({}), 1)

for (const mode of redisModes) {
  suite(`Redis (${mode.name}), two instances`, () => ({ redis: Option.some(mode.target), redisKeyPrefix: `test:${randomUUID()}:` }), 2)
}
