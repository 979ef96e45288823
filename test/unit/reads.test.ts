/**
 * The read model (src/Authors/Reads.ts) over the inputs of every path that looks for an author
 * read: an HTTP request as the front door sees it (its cached-read stage, and the generation its
 * rate check reads: Authors/Http.ts `early`), and a WebSocket package 1 or 2 message (what
 * Ws/Packages.ts `prepare` decodes before the message's rate check). Equivalent requests name the
 * same read — key, scope, roles — on every path; anything the endpoints' schemas refuse is no read;
 * and the front door's fast path reads the canonical forms exactly as the router and the schemas do.
 */
import { Effect, Layer, Result } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { Authors } from "../../src/Authors/Authors.ts"
import { early } from "../../src/Authors/Http.ts"
import { LIST_SCOPE, scopeOfId } from "../../src/Authors/Generations.ts"
import { noReadCache, ReadCache } from "../../src/Authors/ReadCache.ts"
import { type AuthorRead, httpReaders, makeHttpReads, messageRead } from "../../src/Authors/Reads.ts"
import { encodeCursor } from "../../src/Domain/Pagination.ts"
import type { GenerationKey } from "../../src/Domain/RequestContext.ts"
import { PackageHandlers } from "../../src/Ws/Packages.ts"

/** As App.ts configures the router. */
const ROUTER_CONFIG = { maxParamLength: 4096 }
const httpRead = makeHttpReads(ROUTER_CONFIG)
const { canonical, decoded } = httpReaders(ROUTER_CONFIG)

/** The route template the front door gives a path (Http/Validation.ts). */
const templateOf = (url: string) => {
  const path = url.split("?")[0]!
  return path === "/authors" ? "/authors" : path === "/authors/paginated" ? "/authors/paginated" : "/authors/{author_id}"
}
const get = (url: string) => httpRead("GET", templateOf(url), url)
const message = (pkgId: number, data: unknown) => {
  const read = messageRead(pkgId, data)
  return read === undefined || Result.isFailure(read) ? undefined : read.success
}
const named = (read: AuthorRead | undefined) => read === undefined ? undefined : { key: read.key, scope: read.scope, roles: read.roles }

const CURSOR = encodeCursor(41)

describe("one read, whatever the transport", () => {
  it.each<[string, ReadonlyArray<AuthorRead | undefined>]>([
    ["the whole list", [get("/authors"), get("/authors?"), message(1, {}), message(1, { filters: null }), message(1, { filters: { id: null } })]],
    ["the list by id", [get("/authors?id=5"), get("/authors?id=%2B5"), get("/authors?id=05"), get("/authors?id=5&unknown=1"), message(1, { filters: { id: 5 } })]],
    ["the list by substring (HTTP search, WebSocket name or search_term)", [
      get("/authors?search=ab"),
      message(1, { filters: { name: "ab" } }),
      message(1, { filters: { search_term: "ab" } })
    ]],
    ["the first page, by default or asked for", [
      get("/authors/paginated"),
      get("/authors/paginated?page=1"),
      get("/authors/paginated?per_page=20"),
      get("/authors/paginated?page=1&per_page=20"),
      get("/authors/paginated?per_page=20&page=01"),
      message(2, { page: 1, per_page: 20 }),
      message(2, { page: 1, per_page: 20, filters: null, cursor: null })
    ]],
    ["a page clamped to 1000", [
      get("/authors/paginated?per_page=1000"),
      get("/authors/paginated?per_page=5000"),
      get("/authors/paginated?per_page=2147483647"),
      message(2, { page: 1, per_page: 1000 }),
      message(2, { page: 1, per_page: 2147483647 })
    ]],
    ["a filtered page after a cursor", [
      get(`/authors/paginated?id=7&per_page=2&cursor=${CURSOR}`),
      message(2, { page: 1, per_page: 2, cursor: CURSOR, filters: { id: 7 } })
    ]]
  ])("%s: the same key, scope and roles on every path", (_, reads) => {
    expect(reads.every((read) => read !== undefined)).toBe(true)
    for (const read of reads) expect(named(read)).toEqual(named(reads[0]))
  })

  it("a read by id depends on the id's shard; the others on the list", () => {
    expect(get("/authors/70000")!.scope).toBe(scopeOfId(70000))
    expect(get("/authors?id=70000")!.scope).toBe(scopeOfId(70000))
    expect(message(2, { page: 1, per_page: 1, filters: { id: 70000 } })!.scope).toBe(scopeOfId(70000))
    for (const read of [get("/authors"), get("/authors?name=x"), get("/authors/paginated?page=3"), message(1, { filters: { name: "x" } })]) {
      expect(read!.scope).toBe(LIST_SCOPE)
    }
    expect(get("/authors/5")!.roles).toEqual(["get-authors"])
  })

  it("different reads have different keys (name is exact over HTTP, a substring over WebSocket)", () => {
    const keys = [
      get("/authors"),
      get("/authors?name=ab"),
      get("/authors?search=ab"),
      get("/authors/paginated"),
      get("/authors/paginated?page=2"),
      get("/authors/paginated?per_page=21"),
      get(`/authors/paginated?cursor=${CURSOR}`),
      get("/authors/5"),
      get("/authors?id=5")
    ].map((read) => read!.key)
    expect(new Set(keys).size).toBe(keys.length)
  })

  it.each([
    "/authors?id=abc",
    "/authors?id=5&id=6",
    "/authors/paginated?page=0",
    "/authors/paginated?per_page=0",
    `/authors/paginated?per_page=${2 ** 31}`,
    `/authors/paginated?per_page=${2 ** 32}`,
    `/authors/paginated?per_page=${2 ** 52}`,
    `/authors/paginated?page=${2 ** 31}`,
    "/authors/paginated?cursor=nope",
    "/authors/abc",
    `/authors?name=${"x".repeat(1001)}`,
    "/authors?name=a%00b"
  ])("GET %s does not decode: no read (the app answers its 422)", (url) => {
    expect(get(url)).toBeUndefined()
  })

  it("another method or route is no read", () => {
    expect(httpRead("POST", "/authors", "/authors")).toBeUndefined()
    expect(httpRead("PUT", "/authors/{author_id}", "/authors/5")).toBeUndefined()
    expect(httpRead("GET", "/audit-logs", "/audit-logs?id=5")).toBeUndefined()
    expect(httpRead("GET", undefined, "/authors")).toBeUndefined()
  })

  it.each<[number, unknown]>([
    [2, { page: 1, per_page: 2 ** 31 }],
    [2, { page: 2 ** 31, per_page: 1 }],
    [2, { page: 1 }],
    [2, { page: 1, per_page: 1, cursor: "nope" }],
    [1, { filters: { id: "7" } }],
    [1, []]
  ])("package %d with %j does not decode: its schema failure", (pkgId, data) => {
    const read = messageRead(pkgId, data)
    expect(read !== undefined && Result.isFailure(read)).toBe(true)
  })

  it("package 3 is no read", () => {
    expect(messageRead(3, { name: "x" })).toBeUndefined()
  })
})

describe("the front door's fast path agrees with the router and the schemas", () => {
  // Numbers around every bound: the clamp (1000), 9 and 10 digits, 32 bits, safe integers.
  const digits = fc.oneof(
    fc.integer({ min: 1, max: 2000 }).map(String),
    fc.integer({ min: 1, max: 999_999_999 }).map(String),
    fc.integer({ min: 1_000_000_000, max: 9_999_999_999 }).map(String),
    fc.integer({ min: 1, max: 2 ** 53 }).map(String),
    fc.constantFrom("0", "00", "01", "007", "20", "1000", "1001", "999999999", "1000000000", "2147483647", "2147483648", "4294967296", "9007199254740993")
  )
  const odd = fc.oneof(
    fc.constantFrom("", "-1", "+5", "%2B5", " 5", "5 ", "1e3", "1.0", "abc", "%35", "5%00", "a%zz", "%", CURSOR, "1&", "=1"),
    fc.string({ maxLength: 6 })
  )
  const name = fc.oneof(
    { arbitrary: fc.constantFrom("id", "page", "per_page"), weight: 4 },
    { arbitrary: fc.constantFrom("cursor", "name", "search", "x", "ID", "p%61ge", ""), weight: 1 }
  )
  const pair = fc.oneof(
    { arbitrary: fc.tuple(name, digits).map(([n, v]) => `${n}=${v}`), weight: 4 },
    { arbitrary: fc.tuple(name, odd).map(([n, v]) => `${n}=${v}`), weight: 1 },
    { arbitrary: name, weight: 1 }
  )
  const query = fc.array(pair, { maxLength: 4 }).map((pairs) => pairs.join("&"))
  const url = fc.oneof(
    fc.tuple(fc.constantFrom("/authors", "/authors/paginated"), fc.option(query, { nil: undefined })).map(([path, q]) =>
      q === undefined ? path : `${path}?${q}`
    ),
    fc.tuple(fc.oneof(digits, odd), fc.option(query, { nil: undefined })).map(([id, q]) => `/authors/${id}${q === undefined ? "" : `?${q}`}`)
  )

  it("every request the fast path reads, it reads as the router and the endpoints' schemas do", () => {
    let fast = 0
    fc.assert(
      fc.property(url, (u) => {
        const read = canonical(templateOf(u), u)
        if (read === undefined) return
        fast++
        expect(read).toEqual(decoded(u))
      }),
      { numRuns: 5_000 }
    )
    // The property was not met by declining everything.
    expect(fast).toBeGreaterThan(500)
  })

  it.each([
    "/authors",
    "/authors?id=17",
    "/authors/17",
    "/authors/paginated",
    "/authors/paginated?page=17&per_page=20",
    "/authors/paginated?per_page=1000&page=3&id=5"
  ])("reads the usual form %s itself", (u) => {
    expect(canonical(templateOf(u), u)).toEqual(decoded(u))
    expect(canonical(templateOf(u), u)).toBeDefined()
  })
})

describe("the paths that use it", () => {
  /** A read cache whose generation keys name their scope, so the test sees which scope each path asked for. */
  const cache = Layer.succeed(ReadCache, ReadCache.of({
    ...noReadCache,
    generationKey: (scope): GenerationKey => ({ key: `scope:${scope}`, record: false })
  }))
  /** The packages' handlers are not called here: a message is only prepared. */
  const noAuthors = Layer.succeed(Authors, {} as Authors["Service"])

  it("the front door's rate check and a package's rate check read the same generation for the same read", async () => {
    const { stage, packages } = await Effect.runPromise(
      Effect.gen(function*() {
        return { stage: yield* early, packages: yield* PackageHandlers }
      }).pipe(Effect.provide(PackageHandlers.layer.pipe(Layer.provideMerge(Layer.merge(cache, noAuthors)))))
    )
    const claimed = (u: string) => stage.claim("GET", templateOf(u), u)?.generation
    const prepared = (pkgId: number, data: unknown) => packages.get(pkgId)!.prepare(data).generation
    expect(claimed("/authors?id=5")).toEqual({ key: `scope:${scopeOfId(5)}`, record: false })
    expect(prepared(1, { filters: { id: 5 } })).toEqual(claimed("/authors?id=5"))
    expect(prepared(2, { page: 1, per_page: 20 })).toEqual(claimed("/authors/paginated"))
    expect(claimed("/authors/paginated")).toEqual({ key: `scope:${LIST_SCOPE}`, record: false })
    // No read, no generation: a request that does not decode, a write, an unknown package.
    expect(stage.claim("GET", "/authors/paginated", "/authors/paginated?per_page=0")).toBeUndefined()
    expect(stage.claim("POST", "/authors", "/authors")?.generation).toBeUndefined()
    expect(prepared(2, { page: 1, per_page: 0 })).toBeUndefined()
    expect(prepared(3, { name: "x" })).toBeUndefined()
  })
})
