/**
 * The read cache's memory bound (docs/architecture.md#the-read-cache, READ_CACHE_MAX_BYTES) on a table of
 * 1,000,000 authors: pages of 1,000 rows (tens of KB each) fill it far past the bound, and lists of
 * megabytes stream through it, while `read_cache_bytes` never exceeds the bound. One app in this
 * file, so the gauge is its own.
 */
import { randomUUID } from "node:crypto"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { encodeCursor } from "../../src/Domain/Pagination.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, type TestApp } from "../support/TestApp.ts"

const AUTHORS = 1_000_000
const BOUND = 2 * 1024 * 1024

describe.runIf(TEST_DATABASE_URL !== undefined)("the read cache's bound with 1,000,000 authors", () => {
  let app: TestApp
  let token: string
  let lastId: number

  beforeAll(async () => {
    app = await startTestApp({ database: "postgres", config: { rateLimitEnabled: false, readCacheMaxBytes: BOUND } })
    token = (await login(app, "reader")).access_token
    const client = new pg.Client({ connectionString: app.databaseUrl })
    await client.connect()
    try {
      await client.query("INSERT INTO authors (name) SELECT 'Bound ' || g FROM generate_series(1, $1::int) AS g", [AUTHORS])
      lastId = Number((await client.query<{ id: string }>("SELECT max(id) AS id FROM authors")).rows[0]!.id)
    } finally {
      await client.end()
    }
  }, 600_000)
  afterAll(() => app?.close())

  const cacheBytes = async () => (await scrapeMetrics(app.url)).firstOrZero("read_cache_bytes")

  it("holds at most READ_CACHE_MAX_BYTES while pages fill it past the bound and lists of megabytes stream through it", async () => {
    const samples: Array<number> = []
    let sampling = true
    const sampler = (async () => {
      while (sampling) {
        samples.push(await cacheBytes())
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    })()
    const evictions = (await scrapeMetrics(app.url)).firstOrZero("read_cache_evictions_total")
    // Two whole-table lists (~75 MB each, streamed) while 100 keyset pages of 1,000 rows are read
    // twice (~75 KB each: 7.5 MB of answers for a 2 MiB bound).
    const whole = async () => {
      const res = await fetch(`${app.url}/authors`, { headers: { authorization: `Bearer ${token}` } })
      expect(res.status).toBe(200)
      const text = await res.text()
      expect(text.length).toBeGreaterThan(50_000_000)
      return (text.match(/"id":/g) ?? []).length
    }
    const pages = async () => {
      for (let round = 0; round < 2; round++) {
        for (let p = 0; p < 100; p++) {
          const after = lastId - AUTHORS + p * 1000
          const res = await request(app, "GET", `/authors/paginated?per_page=1000&cursor=${encodeCursor(after)}`, { token })
          expect(res.status).toBe(200)
          expect((res.body as { items: Array<unknown> }).items).toHaveLength(1000)
          samples.push(await cacheBytes())
        }
      }
    }
    const search = async () => {
      // "Bound 1…": 111,112 authors, a streamed list of several MB.
      const res = await request(app, "GET", `/authors?search=${encodeURIComponent("Bound 1")}`, { token })
      expect(res.status).toBe(200)
      return (res.body as Array<unknown>).length
    }
    const [counted, , found] = await Promise.all([Promise.all([whole(), whole()]), pages(), search()])
    sampling = false
    await sampler
    samples.push(await cacheBytes())
    expect(counted).toEqual([AUTHORS, AUTHORS])
    expect(found).toBe(111_112)
    expect(Math.max(...samples)).toBeLessThanOrEqual(BOUND)
    expect(Math.max(...samples)).toBeGreaterThan(BOUND / 2)
    expect((await scrapeMetrics(app.url)).firstOrZero("read_cache_evictions_total")).toBeGreaterThan(evictions)
    // Still exact: a page read again after a write to one of its rows shows the write.
    const first = (await request(app, "GET", `/authors/paginated?per_page=1000&cursor=${encodeCursor(lastId - AUTHORS)}`, { token })).body as {
      items: Array<{ id: number; name: string }>
    }
    const admin = (await login(app, "admin")).access_token
    const name = `Bound renamed ${randomUUID()}`
    expect((await request(app, "PUT", `/authors/${first.items[0]!.id}`, { token: admin, body: { name } })).status).toBe(200)
    const again = (await request(app, "GET", `/authors/paginated?per_page=1000&cursor=${encodeCursor(lastId - AUTHORS)}`, { token })).body as {
      items: Array<{ id: number; name: string }>
    }
    expect(again.items[0]!.name).toBe(name)
  }, 600_000)
})
