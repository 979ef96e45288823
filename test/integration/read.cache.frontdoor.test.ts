/**
 * The front door answers read-cache hits itself (the authors' stage, Authors/Http.ts `cachedRead`),
 * without the router and HttpApi. Its answers must be the app's, byte for byte: two instances with
 * the same rows, one as served (cached reads in the front door) and one with tracing on (every
 * read goes through the app), get the same requests in the same order — misses, hits, conditional
 * hits (304 and 200), 401, 403, 404, 422, queries in other forms than the canonical one — and
 * must answer each with the same status, body and headers (all but the per-request ids, the date
 * and the rate-limit window). The pages are asked for with their defaults left out and written
 * out, so a default the front door assumed differently from the endpoint would answer one for the
 * other. The instances share one PostgreSQL (with or without Redis), or — embedded — each holds a
 * copy of one database written before either started.
 */
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { rmSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { encodeCursor } from "../../src/Domain/Pagination.ts"
import { layerTracingTo } from "../../src/Observability/Tracing.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { login, request, signToken, startTestApp, TEST_DATABASE_URL, TEST_REDIS_URL, type TestApp, type TestAppOptions } from "../support/TestApp.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

type Backend = "embedded" | "postgres" | "redis"

/** Headers that differ between two answers to the same request by design. */
const PER_REQUEST = new Set(["date", "x-request-id", "x-ratelimit-reset", "x-ratelimit-remaining", "keep-alive"])

interface Answer {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
}

const fetchAnswer = async (app: TestApp, path: string, headers: Record<string, string>): Promise<Answer> => {
  const res = await fetch(`${app.url}${path}`, { headers })
  const kept: Record<string, string> = {}
  for (const [name, value] of res.headers) if (!PER_REQUEST.has(name)) kept[name] = value
  return { status: res.status, headers: kept, body: await res.text() }
}

const options = (backend: Backend, prefix: string | undefined): TestAppOptions => ({
  database: backend === "embedded" ? "embedded" : "postgres",
  config: {
    ...(prefix !== undefined ? { redis: Option.some(singleRedis(TEST_REDIS_URL ?? "")), redisKeyPrefix: prefix } : {}),
    rateLimitEnabled: true,
    rateLimitPerMinute: 1_000_000
  }
})

const tracing = () => layerTracingTo(new SimpleSpanProcessor(new InMemorySpanExporter()))

/** Enough authors that the default page (20) and a smaller one differ. */
const AUTHORS = 23

const pair = (backend: Backend) => () => {
  let cached: TestApp
  let traced: TestApp
  const tokens = new Map<TestApp, { admin: string; roleless: string }>()
  let ids: ReadonlyArray<number> = []

  // One prefix: the instances share generations (and rate-limit budgets: the remaining count is not compared).
  const prefix = backend === "redis" ? `test-frontdoor-${randomUUID()}:` : undefined

  /** Writes the authors through `app`. */
  const seed = async (app: TestApp) => {
    const admin = (await login(app, "admin")).access_token
    const created: Array<number> = []
    for (let i = 0; i < AUTHORS; i++) {
      const res = await request(app, "POST", "/authors", { token: admin, body: { name: `Front door ${randomUUID()}` } })
      expect(res.status).toBe(201)
      created.push((res.body as { id: number }).id)
    }
    return created
  }

  beforeAll(async () => {
    if (backend === "embedded") {
      // An embedded database belongs to one process: both instances start from a copy of one
      // written (and closed) before, so they hold the same rows, ids and timestamps.
      const writer = await startTestApp(options(backend, prefix))
      ids = await seed(writer)
      await writer.close({ keepDataDir: true })
      cached = await startTestApp({ ...options(backend, prefix), embeddedFrom: writer.dataDir })
      traced = await startTestApp({ ...options(backend, prefix), embeddedFrom: writer.dataDir, tracing: tracing() })
      rmSync(writer.dataDir, { recursive: true, force: true })
    } else {
      cached = await startTestApp(options(backend, prefix))
      traced = await startTestApp({ ...options(backend, prefix), databaseUrl: cached.databaseUrl!, tracing: tracing() })
      ids = await seed(cached)
    }
    for (const app of [cached, traced]) {
      tokens.set(app, {
        admin: (await login(app, "admin")).access_token,
        roleless: await signToken(app, { sub: "roleless", preferred_username: "roleless", roles: ["user"] })
      })
    }
  }, 120_000)
  afterAll(async () => {
    await traced?.close()
    await cached?.close()
  })

  /** The same request to both instances; the answers must be equal. */
  const both = async (path: string, who: "admin" | "roleless" | "none", extra: Record<string, string> = {}) => {
    const answers: Array<Answer> = []
    for (const app of [cached, traced]) {
      const token = who === "none" ? undefined : tokens.get(app)![who]
      answers.push(await fetchAnswer(app, path, {
        "x-correlation-id": `corr-${path.length}`,
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
        ...extra
      }))
    }
    expect(answers[0], `${who} ${path} ${JSON.stringify(extra)}`).toEqual(answers[1])
    return answers[0]!
  }

  it("misses, hits and conditional hits are answered as the app answers them", async () => {
    const [a, b] = ids
    const paths = [
      `/authors/${a}`,
      `/authors?id=${b}`,
      `/authors/paginated?id=${a}`,
      // The default page asked for written out, then with its defaults left out (and the other
      // way round for page 2): each is the endpoint's answer, not the other form's cached one.
      "/authors/paginated?per_page=20",
      "/authors/paginated",
      "/authors/paginated?page=1&per_page=20",
      "/authors/paginated?page=2",
      "/authors/paginated?page=2&per_page=20",
      "/authors/paginated?page=1&per_page=2",
      "/authors/paginated?per_page=5000",
      "/authors/paginated?per_page=2147483647",
      `/authors/paginated?per_page=1&cursor=${encodeCursor(a! - 1)}`,
      "/authors?id=987654321",
      "/authors?id=99999999999",
      // Other forms than the canonical one, read by the endpoints' schemas.
      `/authors?id=%2B${b}`,
      `/authors?id=0${b}`,
      "/authors/paginated?page=01&per_page=%32%30",
      "/authors/paginated?per_page=20&extra=1",
      `/authors/paginated?name=Front%20door`,
      "/authors?search=front"
    ]
    const hitsBefore = (await scrapeMetrics(cached.url)).firstOrZero("read_cache_hits_total")
    for (const path of paths) {
      const miss = await both(path, "admin")
      expect(miss.status, path).toBe(200)
      const hit = await both(path, "admin")
      expect(hit.body, path).toBe(miss.body)
      const etag = hit.headers["etag"]!
      expect(etag, path).toBeTruthy()
      const conditional = await both(path, "admin", { "if-none-match": etag })
      expect(conditional.status, path).toBe(304)
      expect(conditional.body, path).toBe("")
      expect((await both(path, "admin", { "if-none-match": "\"other\"" })).status, path).toBe(200)
    }
    // The cached instance did answer from its cache (hits of the front door and of the handlers count alike).
    expect((await scrapeMetrics(cached.url)).firstOrZero("read_cache_hits_total") - hitsBefore).toBeGreaterThanOrEqual(paths.length * 3)
  })

  it("errors and the queries left to the app are the app's answers, before and after the answer is cached", async () => {
    const [a] = ids
    for (let round = 0; round < 2; round++) {
      expect((await both(`/authors/${a}`, "none")).status).toBe(401)
      expect((await both(`/authors/${a}`, "roleless")).status).toBe(403)
      expect((await both(`/authors?id=${a}`, "roleless")).status).toBe(403)
      expect((await both("/authors/987654321", "admin")).status).toBe(404)
      expect((await both("/authors/paginated?page=0", "admin")).status).toBe(422)
      expect((await both("/authors/paginated?per_page=abc", "admin")).status).toBe(422)
      expect((await both("/authors/paginated?cursor=nope", "admin")).status).toBe(422)
      // 32-bit: the page clamped to 1000 is cached above, the next number is refused on both.
      for (const perPage of [2 ** 31, 2 ** 32, 2 ** 52]) {
        const refused = await both(`/authors/paginated?per_page=${perPage}`, "admin")
        expect(refused.status).toBe(422)
        expect(JSON.parse(refused.body)).toMatchObject({ detail: [{ type: "less_than_equal", loc: ["query", "per_page"] }] })
      }
      for (const path of [`/authors?id=${a}&id=${a}`, `/authors/${a}/`, `/authors//${a}`, `/authors/%3${a}`]) {
        await both(path, "admin")
      }
    }
  })

  /**
   * A create to both instances (the front door's and the app's), a body each: status, headers and
   * body must be equal, the new row's id, name and time aside.
   */
  const bothCreate = async (bodies: readonly [string, string], who: "admin" | "roleless" | "none", contentType = "application/json") => {
    const answers: Array<Answer> = []
    for (const [k, app] of [cached, traced].entries()) {
      const token = who === "none" ? undefined : tokens.get(app)![who]
      const res = await fetch(`${app.url}/authors`, {
        method: "POST",
        headers: { "x-correlation-id": "corr-create", "content-type": contentType, ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
        body: bodies[k]!
      })
      const kept: Record<string, string> = {}
      for (const [name, value] of res.headers) if (!PER_REQUEST.has(name) && name !== "content-length") kept[name] = value
      const text = await res.text()
      answers.push({
        status: res.status,
        headers: kept,
        body: res.status === 201 ? text.replace(/^\{"id":\d+,"name":"[^"]*","created_at":"[^"]*"\}$/, "{row}") : text
      })
    }
    expect(answers[0], `${who} ${bodies[0]}`).toEqual(answers[1])
    return answers[0]!
  }
  const same = (body: string) => [body, body] as const

  it("creates are answered as the app answers them: 201, 409, 422, 401, 403", async () => {
    const created = await bothCreate([JSON.stringify({ name: `  Front door ${randomUUID()}  ` }), JSON.stringify({ name: `Front door ${randomUUID()}` })], "admin")
    expect(created).toMatchObject({ status: 201, body: "{row}" })
    // A name that exists on both (the instances may share one database: the second create is then its 409).
    const name = `Front door taken ${randomUUID()}`
    for (const app of [cached, traced]) await request(app, "POST", "/authors", { token: tokens.get(app)!.admin, body: { name } })
    expect((await bothCreate(same(JSON.stringify({ name: `  ${name}` })), "admin")).status).toBe(409)
    for (const body of ["{", "", "null", "[]", JSON.stringify({}), JSON.stringify({ name: "" }), JSON.stringify({ name: "x".repeat(256) }), JSON.stringify({ name: 7 }), JSON.stringify({ name: "a\u0000b" })]) {
      expect((await bothCreate(same(body), "admin")).status, body).toBe(422)
    }
    expect((await bothCreate(same(JSON.stringify({ name: "x" })), "admin", "text/plain")).status).toBe(422)
    expect((await bothCreate(same(JSON.stringify({ name: "x" })), "none")).status).toBe(401)
    expect((await bothCreate(same(JSON.stringify({ name: "x" })), "roleless")).status).toBe(403)
  })

  /** A write to both instances, each its own path (and body): the answers must be equal. */
  const bothWrite = async (method: "PUT" | "DELETE", paths: readonly [string, string], body: string | undefined, who: "admin" | "roleless" | "none") => {
    const answers: Array<Answer> = []
    for (const [k, app] of [cached, traced].entries()) {
      const token = who === "none" ? undefined : tokens.get(app)![who]
      const res = await fetch(`${app.url}${paths[k]}`, {
        method,
        headers: { "x-correlation-id": "corr-write", ...(body === undefined ? {} : { "content-type": "application/json" }), ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
        ...(body === undefined ? {} : { body })
      })
      const kept: Record<string, string> = {}
      for (const [name, value] of res.headers) if (!PER_REQUEST.has(name)) kept[name] = value
      answers.push({ status: res.status, headers: kept, body: await res.text() })
    }
    expect(answers[0], `${who} ${method} ${paths[0]} ${body}`).toEqual(answers[1])
    return answers[0]!
  }

  it("renames and deletes are answered as the app answers them: 200, 204, 404, 409, 422, 401, 403", async () => {
    const [a, b] = ids
    const nameOf = async (id: number) => ((await request(cached, "GET", `/authors/${id}`, { token: tokens.get(cached)!.admin })).body as { name: string }).name
    const renamed = JSON.stringify({ name: `Front door renamed ${randomUUID()}` })
    expect((await bothWrite("PUT", [`/authors/${a}`, `/authors/${a}`], renamed, "admin")).status).toBe(200)
    expect((await bothWrite("PUT", [`/authors/${a}`, `/authors/${a}`], JSON.stringify({ name: await nameOf(b!) }), "admin")).status).toBe(409)
    expect((await bothWrite("PUT", ["/authors/987654321", "/authors/987654321"], renamed, "admin")).status).toBe(404)
    for (const body of ["{", "", JSON.stringify({}), JSON.stringify({ name: "" })]) {
      expect((await bothWrite("PUT", [`/authors/${a}`, `/authors/${a}`], body, "admin")).status, body).toBe(422)
    }
    expect((await bothWrite("PUT", [`/authors/${a}`, `/authors/${a}`], renamed, "none")).status).toBe(401)
    expect((await bothWrite("PUT", [`/authors/${a}`, `/authors/${a}`], renamed, "roleless")).status).toBe(403)
    expect((await bothWrite("PUT", [`/authors/0${a}`, `/authors/0${a}`], renamed, "admin")).status).toBe(200)
    // Each instance deletes an author it created (the two may share one database).
    const gone = await Promise.all([cached, traced].map(async (app) =>
      ((await request(app, "POST", "/authors", { token: tokens.get(app)!.admin, body: { name: `Front door gone ${randomUUID()}` } })).body as { id: number }).id))
    const paths = gone.map((id) => `/authors/${id}`) as [string, string]
    expect((await bothWrite("DELETE", paths, undefined, "roleless")).status).toBe(403)
    expect((await bothWrite("DELETE", paths, undefined, "admin")).status).toBe(204)
    expect((await bothWrite("DELETE", [paths[0], paths[0]], undefined, "admin")).status).toBe(404)
    expect((await bothWrite("DELETE", ["/authors/abc", "/authors/abc"], undefined, "admin")).status).toBe(422)
  })

  // Without Redis there is one instance (the other would not hear of this one's writes): the read after a write is pinned in read.cache.test.ts.
  if (backend !== "redis") return
  it("a write on one is seen by the next read on both", async () => {
    const [, , c] = ids
    const before = await both(`/authors/${c}`, "admin")
    await both(`/authors/${c}`, "admin")
    const renamed = `Front door renamed ${randomUUID()}`
    expect((await request(cached, "PUT", `/authors/${c}`, { token: tokens.get(cached)!.admin, body: { name: renamed } })).status).toBe(200)
    const after = await both(`/authors/${c}`, "admin", { "if-none-match": before.headers["etag"]! })
    expect(after.status).toBe(200)
    expect(after.body).toContain(renamed)
  })
}

describe.runIf(TEST_DATABASE_URL !== undefined && TEST_REDIS_URL !== undefined)("front door cached reads, generations in Redis", pair("redis"))
describe.runIf(TEST_DATABASE_URL !== undefined)("front door cached reads, generations in process", pair("postgres"))
describe("front door cached reads, embedded database", pair("embedded"))
