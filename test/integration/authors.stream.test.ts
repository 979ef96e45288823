/**
 * GET /authors (unpaginated: docs/http-api.md#authors) is streamed: keyset batches of LIST_BATCH_SIZE rows written
 * as one JSON array in chunks (no Content-Length), byte for byte what the paginated endpoint's
 * items give together. Against the embedded database and (when TEST_DATABASE_URL is set) PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { LIST_BATCH_SIZE } from "../../src/Authors/Repo.ts"
import { authHeader, login, request, startTestApp, TEST_DATABASE_URL, type TestApp } from "../support/TestApp.ts"

const backends = ["embedded", ...(TEST_DATABASE_URL !== undefined ? ["postgres"] as const : [])] as const
/** More than two batches, not a multiple of one. */
const AUTHORS = 2 * LIST_BATCH_SIZE + 537

type Author = { id: number; name: string; created_at: string }

describe.each(backends)("GET /authors streamed (%s)", (backend) => {
  let app: TestApp
  let admin: string

  beforeAll(async () => {
    app = await startTestApp({ database: backend, config: { rateLimitEnabled: false } })
    admin = (await login(app, "admin")).access_token
    let next = 0
    const worker = async () => {
      while (next < AUTHORS) {
        const n = next++
        const res = await request(app, "POST", "/authors", { token: admin, body: { name: `Stream Author ${String(n).padStart(5, "0")} "é\\` } })
        if (res.status !== 201) throw new Error(`seeding failed: ${res.status}`)
      }
    }
    await Promise.all(Array.from({ length: 8 }, worker))
  }, 240_000)
  afterAll(() => app.close())

  /** Every author through keyset pages of the paginated endpoint. */
  const paginated = async () => {
    const items: Array<Author> = []
    let cursor: string | null = null
    do {
      const res = await request(app, "GET", `/authors/paginated?per_page=1000${cursor === null ? "" : `&cursor=${cursor}`}`, { token: admin })
      expect(res.status).toBe(200)
      const body = res.body as { items: Array<Author>; meta: { next_cursor: string | null } }
      items.push(...body.items)
      cursor = body.meta.next_cursor
    } while (cursor !== null)
    return items
  }

  it("returns every author, chunked, byte-identical to the paginated content", async () => {
    const res = await fetch(`${app.url}/authors`, { headers: authHeader(admin) })
    expect(res.status).toBe(200)
    expect(res.headers.get("transfer-encoding")).toBe("chunked")
    expect(res.headers.get("content-length")).toBeNull()
    expect(res.headers.get("content-type")).toMatch(/^application\/json/)
    expect(res.headers.get("x-content-type-options")).toBe("nosniff")
    const text = await res.text()
    const all = await paginated()
    expect(all.length).toBeGreaterThanOrEqual(AUTHORS)
    expect(text).toBe(JSON.stringify(all))
    const ids = (JSON.parse(text) as Array<Author>).map((a) => a.id)
    expect(new Set(ids).size).toBe(ids.length)
    expect(ids).toEqual([...ids].sort((x, y) => x - y))
  })

  it("filters apply across batches; an empty answer is []", async () => {
    const search = await fetch(`${app.url}/authors?search=${encodeURIComponent("author 01")}`, { headers: authHeader(admin) })
    const text = await search.text()
    expect(text).toBe(JSON.stringify((await paginated()).filter((a) => a.name.toLowerCase().includes("author 01"))))
    expect((JSON.parse(text) as Array<Author>).length).toBe(LIST_BATCH_SIZE)
    const none = await fetch(`${app.url}/authors?search=no-such-author`, { headers: authHeader(admin) })
    expect(none.status).toBe(200)
    expect(await none.text()).toBe("[]")
  })

  it("an answer smaller than one batch is one plain body with its length, the same bytes", async () => {
    const one = (await paginated())[7]!
    const res = await fetch(`${app.url}/authors?id=${one.id}`, { headers: authHeader(admin) })
    expect(res.status).toBe(200)
    expect(res.headers.get("transfer-encoding")).toBeNull()
    expect(res.headers.get("content-type")).toMatch(/^application\/json/)
    const text = await res.text()
    expect(res.headers.get("content-length")).toBe(String(Buffer.byteLength(text)))
    expect(text).toBe(JSON.stringify([one]))
  })

  it("errors before the first byte are the usual JSON errors", async () => {
    const res = await request(app, "GET", "/authors?id=abc", { token: admin })
    expect(res.status).toBe(422)
    const anonymous = await request(app, "GET", "/authors")
    expect(anonymous).toMatchObject({ status: 401, body: { detail: "Not authenticated" } })
  })
})
