/**
 * The read cache at the boundary (docs/http-api.md#read-after-write): a read (HTTP or WebSocket) that
 * starts after a write's response was sent reflects the write, on every instance; a write made
 * directly in the database is reflected within 1 s; an unfiltered page after a create is made from
 * its kept rows and the new total (docs/architecture.md#the-read-cache), equal to what the database
 * says; READ_CACHE_MAX_BYTES=0 switches the cache off; Redis down in open mode still gives correct
 * answers. Every read below is first made once before the write (so a stale answer would be in the
 * cache), then after it.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { encodeCursor } from "../../src/Domain/Pagination.ts"
import { eventually } from "../support/Eventually.ts"
import { type RedisMode, redisModes } from "../support/RedisModes.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, TEST_REDIS_URL, type TestApp, type TestAppOptions } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

interface Author {
  readonly id: number
  readonly name: string
}

/** What a reader must see of author `id`: its name, or nothing (deleted). */
type Expected = { readonly id: number; readonly name: string | undefined }

const rows = (body: unknown): ReadonlyArray<Author> => body as ReadonlyArray<Author>

/**
 * The reads of one author, each of a different kind: by id (HTTP path and filters, WebSocket
 * filter: the id's shard) and through the whole list (cursor pages, a search for its marker: the
 * list's scope). Each returns what it saw of the author: its name, or undefined.
 */
const readers = (app: TestApp, token: string, ws: WsClient, markerOf: (id: number) => string) => {
  const find = (list: ReadonlyArray<Author>, id: number) => list.find((a) => a.id === id)?.name
  const get = async (path: string) => {
    const res = await request(app, "GET", path, { token })
    if (res.status !== 200 && res.status !== 404) throw new Error(`GET ${path}: ${res.status} ${JSON.stringify(res.body)}`)
    return res
  }
  const items = async (path: string) => ((await get(path)).body as { items: ReadonlyArray<Author> }).items
  return [
    async (id: number) => {
      const res = await get(`/authors/${id}`)
      return res.status === 404 ? undefined : (res.body as Author).name
    },
    async (id: number) => find(rows((await get(`/authors?id=${id}`)).body), id),
    async (id: number) => find(await items(`/authors/paginated?id=${id}`), id),
    async (id: number) => find(await items(`/authors/paginated?per_page=1&cursor=${encodeCursor(id - 1)}`), id),
    // A full page around the author (when later authors exist): its rows may be kept apart from its total.
    async (id: number) => find(await items(`/authors/paginated?per_page=20&cursor=${encodeCursor(Math.max(0, id - 10))}`), id),
    async (id: number) => find(rows((await get(`/authors?search=${encodeURIComponent(markerOf(id))}`)).body), id),
    async (id: number) => find(rows((await ws.request(1, { filters: { id } })).data), id),
    async (id: number) => find(rows((await ws.request(1, { filters: { search_term: markerOf(id) } })).data), id),
    async (id: number) => find(rows((await ws.request(2, { page: 1, per_page: 1, cursor: encodeCursor(id - 1) })).data), id),
    async (id: number) => find(rows((await ws.request(2, { page: 1, per_page: 20, cursor: encodeCursor(Math.max(0, id - 10)) })).data), id),
    async (id: number) => find(rows((await ws.request(2, { page: 1, per_page: 5, filters: { id } })).data), id)
  ] as const
}

const metricOf = async (app: TestApp, name: string) => (await scrapeMetrics(app.url)).firstOrZero(name)

/**
 * Polls `read` until it gives `expected`, and fails if a read that started more than `boundMs` after
 * the call still gave anything else: the bound is on the service's staleness, not on how fast this
 * machine answers (a read started before the bound may be stale, however long it took).
 */
const visibleWithin = async (read: () => Promise<string | undefined>, expected: string | undefined, boundMs: number) => {
  const start = performance.now()
  const staleAfterBound: Array<{ readonly startedAfterMs: number; readonly answered: string | undefined }> = []
  await eventually(async () => {
    const startedAfterMs = Math.round(performance.now() - start)
    const answered = await read()
    if (answered === expected) return true
    if (startedAfterMs > boundMs) staleAfterBound.push({ startedAfterMs, answered })
    return false
  }, `${String(expected)} to be read`)
  expect(staleAfterBound, `reads started more than ${boundMs} ms after the write that did not reflect it`).toEqual([])
}

const appOptions = (prefix: string, extra: Partial<NonNullable<TestAppOptions["config"]>> = {}, mode?: RedisMode): TestAppOptions => ({
  database: "postgres",
  config: {
    redis: Option.some(mode?.target ?? singleRedis(TEST_REDIS_URL ?? "")),
    redisKeyPrefix: prefix,
    rateLimitEnabled: true,
    rateLimitPerMinute: 1_000_000,
    wsMessageRateLimit: 1_000_000,
    wsMaxConnectionsPerUser: 50,
    ...extra
  }
})

// Once per Redis mode of the run (one server, a Redis Cluster, a Sentinel group: test/support/RedisModes.ts).
for (const mode of redisModes) describe.runIf(TEST_DATABASE_URL !== undefined)(`two instances on one PostgreSQL and Redis (${mode.name})`, () => {
  let a: TestApp
  let b: TestApp
  let writer: string
  let reader: string
  const sockets: Array<WsClient> = []
  const prefix = `test-read-cache-${randomUUID()}:`

  beforeAll(async () => {
    a = await startTestApp(appOptions(prefix, {}, mode))
    b = await startTestApp({ ...appOptions(prefix, {}, mode), databaseUrl: a.databaseUrl! })
    writer = (await login(a, "admin")).access_token
    reader = (await login(b, "reader")).access_token
  })
  afterAll(async () => {
    for (const s of sockets) s.ws.terminate()
    await b?.close()
    await a?.close()
  })

  const socket = () => {
    const ws = connectWs(b.url, { token: reader })
    sockets.push(ws)
    return ws
  }

  it("1,000 writes on one instance, each read on the other (HTTP and WebSocket 1/2) before and after: no read misses a write answered before it started", async () => {
    const WORKERS = 8
    const WRITES = Number(process.env["RC_WRITES"] ?? 1000)
    const run = randomUUID().slice(0, 8)
    const markers = new Map<number, string>()
    const stale: Array<string> = []
    let writes = 0
    const worker = async (w: number) => {
      const ws = socket()
      const kinds = readers(b, reader, ws, (id) => markers.get(id)!)
      /** One write: create (when there is no author), rename, or delete (every fourth step). */
      const write = async (step: number, current: Expected | undefined): Promise<Expected> => {
        writes++
        if (current === undefined || current.name === undefined) {
          const marker = `rc${run}w${w}s${step}z`
          const res = await request(a, "POST", "/authors", { token: writer, body: { name: marker } })
          expect(res.status).toBe(201)
          markers.set((res.body as Author).id, marker)
          return { id: (res.body as Author).id, name: marker }
        }
        if (step % 4 === 3) {
          expect((await request(a, "DELETE", `/authors/${current.id}`, { token: writer })).status).toBe(204)
          return { id: current.id, name: undefined }
        }
        const name = `${markers.get(current.id)} ${step}`
        expect((await request(a, "PUT", `/authors/${current.id}`, { token: writer, body: { name } })).status).toBe(200)
        return { id: current.id, name }
      }
      let current: Expected | undefined
      for (let step = 0; step < WRITES / WORKERS; step++) {
        const kind = (step * 7 + w) % kinds.length
        if (current !== undefined) await kinds[kind]!(current.id) // the answer from before the write, cached
        current = await write(step, current)
        const seen = await kinds[kind]!(current.id)
        if (seen !== current.name) stale.push(`worker ${w} step ${step} kind ${kind}: saw ${seen}, wrote ${current.name}`)
      }
    }
    await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)))
    expect(writes).toBe(WRITES)
    expect(stale).toEqual([])
  }, 300_000)

  it("a not-found answer cached for an id that does not exist yet goes when the author is created", async () => {
    const client = new pg.Client({ connectionString: a.databaseUrl })
    await client.connect()
    try {
      // No other writer runs now: the next create takes the sequence's next value.
      const next = Number((await client.query<{ id: string }>("SELECT last_value + 1 AS id FROM authors_id_seq")).rows[0]!.id)
      const ws = socket()
      for (let i = 0; i < 2; i++) {
        expect((await request(b, "GET", `/authors/${next}`, { token: reader })).status).toBe(404)
        expect((await request(b, "GET", `/authors?id=${next}`, { token: reader })).body).toEqual([])
        expect((await ws.request(1, { filters: { id: next } })).data).toEqual([])
      }
      const created = await request(a, "POST", "/authors", { token: writer, body: { name: `Next ${randomUUID()}` } })
      expect((created.body as Author).id).toBe(next)
      expect((await request(b, "GET", `/authors/${next}`, { token: reader })).body).toEqual(created.body)
      expect((await request(b, "GET", `/authors?id=${next}`, { token: reader })).body).toEqual([created.body])
      expect((await ws.request(1, { filters: { id: next } })).data).toEqual([created.body])
    } finally {
      await client.end()
    }
  })

  it("an unfiltered page read after a create on the other instance: its kept rows and the new total, as the database says; a rename on it shows", async () => {
    const client = new pg.Client({ connectionString: a.databaseUrl })
    await client.connect()
    try {
      const ws = socket()
      const create = async () => {
        const res = await request(a, "POST", "/authors", { token: writer, body: { name: `Page ${randomUUID()}` } })
        expect(res.status).toBe(201)
      }
      /** The first page of 20 as the database says it now. */
      const database = async () => {
        const total = Number((await client.query<{ n: string }>("SELECT count(*) AS n FROM authors")).rows[0]!.n)
        const items = (await client.query<{ id: number; name: string }>("SELECT id::int AS id, name FROM authors ORDER BY id LIMIT 20")).rows
        return { items, total, pages: Math.ceil(total / 20), has_more: total > 20 }
      }
      const onB = async () => {
        const body = (await request(b, "GET", "/authors/paginated?page=1&per_page=20", { token: reader })).body as {
          items: ReadonlyArray<Author>
          meta: { total: number; pages: number; has_more: boolean }
        }
        return { items: body.items.map(({ id, name }) => ({ id, name })), total: body.meta.total, pages: body.meta.pages, has_more: body.meta.has_more }
      }
      const onWs = async () => {
        const reply = await ws.request(2, { page: 1, per_page: 20 })
        const meta = reply.meta as { total: number; pages: number; has_more: boolean }
        return { items: rows(reply.data).map(({ id, name }) => ({ id, name })), total: meta.total, pages: meta.pages, has_more: meta.has_more }
      }
      // At least 21 authors, the last created through the service (the page's next row is below it).
      for (let i = 0; i < 21; i++) await create()
      for (let i = 0; i < 2; i++) {
        expect(await onB()).toEqual(await database())
        expect(await onWs()).toEqual(await database())
      }

      await create()
      const hits = await metricOf(b, "read_cache_hits_total")
      const misses = await metricOf(b, "read_cache_misses_total")
      const after = await onB()
      // The page's rows were kept (a hit); only the total was read (a miss).
      expect(await metricOf(b, "read_cache_hits_total")).toBe(hits + 1)
      expect(await metricOf(b, "read_cache_misses_total")).toBe(misses + 1)
      expect(after).toEqual(await database())
      expect(await onWs()).toEqual(await database())

      const first = after.items[0]!
      expect((await request(a, "PUT", `/authors/${first.id}`, { token: writer, body: { name: `${first.name} renamed` } })).status).toBe(200)
      const renamed = await onB()
      expect(renamed.items[0]).toEqual({ id: first.id, name: `${first.name} renamed` })
      expect(renamed).toEqual(await database())
      expect(await onWs()).toEqual(await database())
    } finally {
      await client.end()
    }
  })

  it("serves repeated reads from memory (the counters move)", async () => {
    const created = await request(a, "POST", "/authors", { token: writer, body: { name: `Hit ${randomUUID()}` } })
    const id = (created.body as Author).id
    await request(b, "GET", `/authors/${id}`, { token: reader })
    const hits = await metricOf(b, "read_cache_hits_total")
    for (let i = 0; i < 3; i++) expect((await request(b, "GET", `/authors/${id}`, { token: reader })).status).toBe(200)
    expect(await metricOf(b, "read_cache_hits_total")).toBeGreaterThanOrEqual(hits + 3)
    expect(await metricOf(b, "read_cache_bytes")).toBeGreaterThan(0)
  })

  it("a write made directly in the database (insert, update, delete) is visible on both instances within 1 s", async () => {
    const client = new pg.Client({ connectionString: a.databaseUrl })
    await client.connect()
    try {
      const name = `Outside ${randomUUID()}`
      const ws = socket()
      const byId = (app: TestApp, token: string) => async (id: number) => {
        const res = await request(app, "GET", `/authors/${id}`, { token })
        return res.status === 404 ? undefined : (res.body as Author).name
      }
      const onA = byId(a, writer)
      const onB = byId(b, reader)
      const byWs = async (id: number) => rows((await ws.request(2, { page: 1, per_page: 1, cursor: encodeCursor(id - 1) })).data).find((x) => x.id === id)?.name
      // The next id, read (not found) and cached before it exists.
      const next = Number((await client.query<{ id: string }>("SELECT coalesce(max(id), 0) + 1 AS id FROM authors")).rows[0]!.id)
      for (const read of [onA, onB, byWs]) expect(await read(next)).toBeUndefined()
      const inserted = await client.query<{ id: string }>("INSERT INTO authors (name) VALUES ($1) RETURNING id", [name])
      const id = Number(inserted.rows[0]!.id)
      for (const read of [onA, onB, byWs]) await visibleWithin(() => read(id), name, 1000)
      for (const read of [onA, onB, byWs]) expect(await read(id)).toBe(name) // cached again
      await client.query("UPDATE authors SET name = $1 WHERE id = $2", [`${name} renamed`, id])
      for (const read of [onA, onB, byWs]) await visibleWithin(() => read(id), `${name} renamed`, 1000)
      await client.query("DELETE FROM authors WHERE id = $1", [id])
      for (const read of [onA, onB, byWs]) await visibleWithin(() => read(id), undefined, 1000)
    } finally {
      await client.end()
    }
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("one instance on PostgreSQL, no Redis (generations in process)", () => {
  let app: TestApp
  let admin: string
  beforeAll(async () => {
    app = await startTestApp({ database: "postgres", config: { rateLimitEnabled: false } })
    admin = (await login(app, "admin")).access_token
  })
  afterAll(() => app?.close())

  it("reads after its own writes reflect them; a write made directly in the database within 1 s", async () => {
    const created = await request(app, "POST", "/authors", { token: admin, body: { name: `Local ${randomUUID()}` } })
    const id = (created.body as Author).id
    const read = async () => ((await request(app, "GET", `/authors/paginated?id=${id}`, { token: admin })).body as { items: Array<Author> }).items[0]?.name
    expect(await read()).toBe((created.body as Author).name)
    expect((await request(app, "PUT", `/authors/${id}`, { token: admin, body: { name: "Local renamed" } })).status).toBe(200)
    expect(await read()).toBe("Local renamed")
    // An unfiltered page, read before and after a create: the new total (its rows kept).
    const page = async () => ((await request(app, "GET", "/authors/paginated?per_page=1", { token: admin })).body as { meta: { total: number } }).meta.total
    const total = await page()
    expect(await page()).toBe(total)
    expect((await request(app, "POST", "/authors", { token: admin, body: { name: `Local ${randomUUID()}` } })).status).toBe(201)
    expect(await page()).toBe(total + 1)
    const client = new pg.Client({ connectionString: app.databaseUrl })
    await client.connect()
    try {
      await client.query("UPDATE authors SET name = 'Local outside' WHERE id = $1", [id])
      await visibleWithin(read, "Local outside", 1000)
    } finally {
      await client.end()
    }
  })
})

describe("READ_CACHE_MAX_BYTES=0 switches the cache off", () => {
  let app: TestApp
  let admin: string
  beforeAll(async () => {
    app = await startTestApp({ config: { rateLimitEnabled: false, readCacheMaxBytes: 0 } })
    admin = (await login(app, "admin")).access_token
  })
  afterAll(() => app?.close())

  it("answers are read from the database every time, and are still exact", async () => {
    const hits = await metricOf(app, "read_cache_hits_total")
    const misses = await metricOf(app, "read_cache_misses_total")
    // The registry is the process's: other apps of this file may have moved the gauge; this one never does.
    const bytes = await metricOf(app, "read_cache_bytes")
    const created = await request(app, "POST", "/authors", { token: admin, body: { name: `Off ${randomUUID()}` } })
    const id = (created.body as Author).id
    for (let i = 0; i < 3; i++) expect((await request(app, "GET", `/authors/${id}`, { token: admin })).body).toEqual(created.body)
    await request(app, "PUT", `/authors/${id}`, { token: admin, body: { name: "Off renamed" } })
    expect((await request(app, "GET", `/authors/${id}`, { token: admin })).body).toMatchObject({ name: "Off renamed" })
    expect(await metricOf(app, "read_cache_hits_total")).toBe(hits)
    expect(await metricOf(app, "read_cache_misses_total")).toBe(misses)
    expect(await metricOf(app, "read_cache_bytes")).toBe(bytes)
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined && TEST_REDIS_URL !== undefined)("Redis down with RATE_LIMIT_FAIL_MODE=open", () => {
  it("answers stay exact on both instances: reads go to the database, and a write's failed bump reaches the other instance through PostgreSQL", async () => {
    const { host, port } = hostPort(TEST_REDIS_URL ?? "")
    const proxy = await startTcpProxy(host, port)
    const prefix = `test-read-cache-down-${randomUUID()}:`
    const a = await startTestApp(appOptions(prefix, {
      redis: Option.some(singleRedis(viaProxy(TEST_REDIS_URL ?? "", proxy))),
      rateLimitFailMode: "open"
    }))
    const b = await startTestApp({ ...appOptions(prefix), databaseUrl: a.databaseUrl! })
    try {
      const onA = (await login(a, "admin")).access_token
      const onB = (await login(b, "reader")).access_token
      const created = await request(a, "POST", "/authors", { token: onA, body: { name: `Down ${randomUUID()}` } })
      const id = (created.body as Author).id
      const name = (app: TestApp, token: string) => async () => ((await request(app, "GET", `/authors/${id}`, { token })).body as Author).name
      // Cached on both.
      for (let i = 0; i < 2; i++) {
        expect(await name(a, onA)()).toBe((created.body as Author).name)
        expect(await name(b, onB)()).toBe((created.body as Author).name)
      }
      const bypassed = await metricOf(a, "read_cache_bypassed_total")
      const errors = await metricOf(a, "read_cache_invalidation_errors_total")
      await proxy.cut()
      expect((await request(a, "PUT", `/authors/${id}`, { token: onA, body: { name: "Down renamed" } })).status).toBe(200)
      // This instance reads from the database while it cannot read generations.
      expect(await name(a, onA)()).toBe("Down renamed")
      expect(await metricOf(a, "read_cache_invalidation_errors_total")).toBe(errors + 1)
      expect(await metricOf(a, "read_cache_bypassed_total")).toBeGreaterThan(bypassed)
      // The other instance hears of it through PostgreSQL.
      await visibleWithin(name(b, onB), "Down renamed", 1000)
      await proxy.restore()
      await visibleWithin(async () => {
        await request(a, "PUT", `/authors/${id}`, { token: onA, body: { name: "Down back" } })
        return name(a, onA)()
      }, "Down back", 15_000)
      // While this instance's Redis connection was coming back its write may have gone the
      // PostgreSQL way: the other instance drops its answer when the NOTIFY arrives.
      await visibleWithin(name(b, onB), "Down back", 1000)
    } finally {
      await b.close()
      await a.close()
      await proxy.close()
    }
  })
})
