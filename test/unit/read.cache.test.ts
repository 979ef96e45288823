/**
 * The read cache's parts (src/Authors/ReadCache.ts, ReadAnswers.ts): the byte-bounded LRU, the tag
 * logic (which writes change which reads' tags, the list's generations), the in-process cache end
 * to end, unfiltered pages made again from their kept rows after an append (Authors.ts `readListPage`),
 * the answers' text (byte for byte what Schema encoding gives, the same ETag for the same body), the
 * bump on every exit of a write (Writes.ts), the maximum age, and id lookups batched (Authors.ts `lookup`).
 */
import { Clock, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Schema, type Scope } from "effect"
import { describe, expect, it } from "vitest"
import { AuthorEvents, Authors } from "../../src/Authors/Authors.ts"
import {
  authorAnswer,
  authorKey,
  listAnswer,
  listKey,
  pageAnswer,
  pageKey,
  ReadAnswer,
  textBytes,
  totalAnswer,
  withTotal
} from "../../src/Authors/ReadAnswers.ts"
import {
  generationKeyOf,
  ID_SHARDS,
  LIST_SCOPE,
  ListGenerations,
  listTagsOf,
  LocalEpochs,
  scopeOf,
  scopeOfId,
  type WriteKind
} from "../../src/Authors/Generations.ts"
import { AnswerStore, ENTRY_OVERHEAD_BYTES, makeReadCache, ReadCache, type WriteOutcome } from "../../src/Authors/ReadCache.ts"
import { AuthorRepo } from "../../src/Authors/Repo.ts"
import { readCacheHitsTotal, readCacheMissesTotal } from "../../src/Observability/Metrics.ts"
import { Author, AuthorPage } from "../../src/Domain/Author.ts"
import { AuthorNameTaken, AuthorNotFound } from "../../src/Errors.ts"

const row = (id: number, name = `Author ${id}`) => ({ id, name, created_at: "2026-01-31T12:00:00.000000" })
const answerOf = (bytes: number, readAt = 0) => listAnswer([row(1, "x".repeat(Math.max(0, bytes - 60)))], readAt)
const sizeOf = (key: string, answer: ReadAnswer) => textBytes(answer.body) + key.length * 2 + ENTRY_OVERHEAD_BYTES

describe("AnswerStore (LRU by bytes)", () => {
  it("serves an answer only under the tag it was stored with; another tag's reader leaves it for readers of its own", () => {
    const store = new AnswerStore(1_000_000)
    const answer = answerOf(200)
    store.put("k", "t1", answer)
    expect(store.get("k", "t1", 0)).toBe(answer)
    expect(store.get("k", "t2", 0)).toBeUndefined()
    // A reader holding an older tag does not drop the newer answer (review C6).
    expect(store.get("k", "t1", 0)).toBe(answer)
  })

  it("an answer read later under another tag replaces the one stored; a slow load read earlier does not", () => {
    const store = new AnswerStore(1_000_000)
    const newer = answerOf(200, 10)
    store.put("k", "t2", newer)
    expect(store.put("k", "t1", answerOf(201, 5))).toBe(false)
    expect(store.get("k", "t2", 10)).toBe(newer)
    const newest = answerOf(202, 20)
    expect(store.put("k", "t3", newest)).toBe(true)
    expect(store.get("k", "t3", 20)).toBe(newest)
    expect(store.get("k", "t2", 20)).toBeUndefined()
    expect(store.size).toBe(1)
  })

  it("never holds more than its bound, evicting the least recently used first", () => {
    const bound = 20_000
    const store = new AnswerStore(bound)
    const answers = Array.from({ length: 40 }, (_, i) => [`k${i}`, answerOf(900 + i)] as const)
    for (const [key, answer] of answers.slice(0, 3)) store.put(key, "t", answer)
    store.get("k0", "t", 0) // k0 used: k1 is now the least recently used
    for (const [key, answer] of answers.slice(3)) {
      store.put(key, "t", answer)
      expect(store.bytes).toBeLessThanOrEqual(bound)
    }
    expect(store.get("k1", "t", 0)).toBeUndefined()
    expect(store.get("k39", "t", 0)).toBe(answers[39]![1])
    // The count is exact: the sum of what is held.
    const held = answers.filter(([key]) => store.get(key, "t", 0) !== undefined)
    expect(store.bytes).toBe(held.reduce((n, [key, answer]) => n + sizeOf(key, answer), 0))
  })

  it("does not store an answer above 1/16 of the bound", () => {
    const store = new AnswerStore(16_000)
    expect(store.put("big", "t", answerOf(1_200))).toBe(false)
    expect(store.put("small", "t", answerOf(100))).toBe(true)
    expect(store.size).toBe(1)
  })

  it("counts a two-byte string twice", () => {
    expect(textBytes("abc")).toBe(3)
    expect(textBytes("é€")).toBe(4)
    expect(textBytes("a😀")).toBe(6)
  })
})

describe("tags", () => {
  it("a read filtered by id depends on its id's shard, any other read on the list", () => {
    expect(scopeOf({})).toBe(LIST_SCOPE)
    expect(scopeOf({ id: 5 })).toBe(5)
    expect(scopeOf({ id: ID_SHARDS + 5 })).toBe(5)
    expect(scopeOfId(-1)).toBe(ID_SHARDS - 1)
    expect(scopeOfId(9_007_199_254_740_991)).toBe(9_007_199_254_740_991 % ID_SHARDS)
    expect(generationKeyOf(LIST_SCOPE)).toBe("authors:gen:all")
    expect(generationKeyOf(7)).toBe("authors:gen:id:7")
  })

  it("a write of id 5 changes shard 5's epoch and the list's generations, no other scope; one of unknown id the list only", () => {
    const epochs = new LocalEpochs(true)
    const snapshot = () => Array.from({ length: ID_SHARDS + 1 }, (_, scope) => epochs.tag(scope))
    const changedBy = (write: () => void) => {
      const before = snapshot()
      write()
      return snapshot().flatMap((tag, scope) => (tag !== before[scope] ? [scope] : []))
    }
    expect(changedBy(() => epochs.written([5], "update"))).toEqual([5, LIST_SCOPE])
    expect(changedBy(() => epochs.written(undefined, "create"))).toEqual([LIST_SCOPE])
  })

  it("one statement's creates: their shards and one append for all; the same statement seen again (its notification after its bump, or before) moves nothing", () => {
    for (const order of ["bump first", "notification first"] as const) {
      const epochs = new LocalEpochs(true)
      epochs.written([3], "create")
      const before = [epochs.tag(LIST_SCOPE), epochs.tag(5), epochs.tag(6), epochs.tag(7)]
      const bump = () => epochs.written([7, 5, 6], "create")
      const notification = () => epochs.changed("c:5,6,7")
      ;(order === "bump first" ? bump : notification)()
      const once = [epochs.tag(LIST_SCOPE), epochs.tag(5), epochs.tag(6), epochs.tag(7)]
      expect(once.slice(1), order).toEqual(before.slice(1).map((tag) => String(Number(tag) + 1)))
      expect(once[0]!.split(".")[0], `${order}: an append leaves rows`).toBe(before[0]!.split(".")[0])
      expect(once[0]!.split(".")[2], order).toBe("7")
      ;(order === "bump first" ? notification : bump)()
      expect([epochs.tag(LIST_SCOPE), epochs.tag(5), epochs.tag(6), epochs.tag(7)], order).toEqual(once)
    }
  })

  it("a create seen once is forgotten by an update or a delete of it: a create that reuses its id (by hand) moves its shard again", () => {
    const epochs = new LocalEpochs(true)
    epochs.changed("c:9") // another instance's create: seen once, by the feed
    epochs.changed("d:9")
    const before = epochs.tag(9)
    epochs.changed("c:9") // written again by hand, with the same id
    expect(epochs.tag(9)).not.toBe(before)
  })

  it("the list's generations: an append (a create not below the high-water) leaves `rows`; any other write moves it", () => {
    const list = new ListGenerations()
    const parts = () => list.value.split(".").map(Number)
    expect(parts()).toEqual([0, 0, 0])
    list.written(101, "create") // an append
    expect(parts()).toEqual([0, 1, 101])
    list.written(100, "create") // committed before 101, bumped after it: not an append
    expect(parts()).toEqual([1, 2, 101])
    list.written(102, "create")
    expect(parts()).toEqual([1, 3, 102])
    list.written(102, "create") // the same create again (its bump, then its notification): still an append
    expect(parts()).toEqual([1, 4, 102])
    list.written(5, "update")
    expect(parts()).toEqual([2, 5, 102])
    list.written(5, "delete")
    expect(parts()).toEqual([3, 6, 102])
    list.written(undefined, "create") // a create of unknown id (its outcome unknown): not an append
    expect(parts()).toEqual([4, 7, 102])
  })

  it("a list tag splits into the rows' tag, the total's tag and the smallest high-water (shared and local records)", () => {
    expect(listTagsOf("7.9.101")).toEqual({ rows: "7", count: "9", high: 101 })
    expect(listTagsOf("7.9.101:3.4.50")).toEqual({ rows: "7:3", count: "9:4", high: 50 })
    expect(listTagsOf("1712345678901234.1712345678901240.0:0.0.0")).toEqual({ rows: "1712345678901234:0", count: "1712345678901240:0", high: 0 })
    for (const tag of ["5:3", "3", "1.2:3", "1.2.x:3", "1.2.3:4", "1.2.:1.2.3"]) expect(listTagsOf(tag), tag).toBeUndefined()
  })

  it("a notification changes the ids' shards and the list; `all`, an unknown kind or garbage changes every scope", () => {
    const epochs = new LocalEpochs(true)
    const snapshot = () => Array.from({ length: ID_SHARDS + 1 }, (_, scope) => epochs.tag(scope))
    let before = snapshot()
    for (const payload of [`1,${ID_SHARDS + 2},3`, `c:1,${ID_SHARDS + 2},3`, `u:1,${ID_SHARDS + 2},3`, `d:1,${ID_SHARDS + 2},3`]) {
      before = snapshot()
      epochs.changed(payload)
      expect(snapshot().flatMap((t, s) => (t !== before[s] ? [s] : [])), payload).toEqual([1, 2, 3, LIST_SCOPE])
    }
    for (const payload of ["all", "", "1,x", "1;DROP", "x:1", "c:", "c:1,"]) {
      before = snapshot()
      epochs.changed(payload)
      expect(snapshot().every((t, s) => t !== before[s]), payload).toBe(true)
    }
  })

  it("a notified create above every create seen moves the list's total only; any other write its rows too", () => {
    const epochs = new LocalEpochs(true)
    const parts = () => listTagsOf(epochs.tag(LIST_SCOPE))!
    epochs.changed("c:10")
    let before = parts()
    epochs.changed("c:12,11") // one statement's creates, in any order: both appends
    expect(parts()).toMatchObject({ rows: before.rows, high: 12 })
    expect(parts().count).not.toBe(before.count)
    for (const payload of ["c:5", "u:12", "d:12", "12", "all"]) {
      before = parts()
      epochs.changed(payload)
      expect(parts().rows, payload).not.toBe(before.rows)
      expect(parts().count, payload).not.toBe(before.count)
    }
  })
})

const memoryCache = (maxBytes = 1_000_000) =>
  makeReadCache({ maxBytes, maxAgeMs: 0, shared: undefined, feed: undefined, settled: Effect.void })

describe("the in-process cache", () => {
  it("answers a second read from memory, and a read after a write of that scope from the database", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const cache = yield* memoryCache()
      let loads = 0
      const load = Effect.sync(() => {
        loads++
        return listAnswer([row(loads)], 0)
      })
      const readId = (id: number) => cache.read(listKey({ id }), cache.tag(scopeOfId(id), undefined), load)
      const first = yield* readId(5)
      expect(yield* readId(5)).toBe(first)
      expect(loads).toBe(1)
      yield* cache.written([70], "update", "committed") // another shard: untouched
      expect(yield* readId(5)).toBe(first)
      yield* cache.written([ID_SHARDS + 5], "update", "committed") // shard 5
      expect(yield* readId(5)).not.toBe(first)
      expect(loads).toBe(2)
    })))
  })

  it("concurrent misses of one key share one load", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const cache = yield* memoryCache()
      let loads = 0
      const load = Effect.andThen(Effect.sleep("20 millis"), Effect.sync(() => {
        loads++
        return listAnswer([row(1)], 0)
      }))
      const tag = cache.tag(LIST_SCOPE, undefined)
      const answers = yield* Effect.all(Array.from({ length: 10 }, () => cache.read("k", tag, load)), { concurrency: "unbounded" })
      expect(loads).toBe(1)
      expect(new Set(answers).size).toBe(1)
    })))
  })

  it("does not store what is not an answer (a streamed list), nor anything when off, nor under no tag", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const cache = yield* memoryCache()
      let loads = 0
      const streamedLoad = Effect.sync(() => ({ streamed: ++loads }))
      const tag = cache.tag(LIST_SCOPE, undefined)
      yield* cache.read("s", tag, streamedLoad)
      yield* cache.read("s", tag, streamedLoad)
      expect(loads).toBe(2)
      const answerLoad = Effect.sync(() => listAnswer([row(++loads)], 0))
      yield* cache.read("u", undefined, answerLoad)
      yield* cache.read("u", undefined, answerLoad)
      expect(loads).toBe(4)
      const off = yield* memoryCache(0)
      expect(off.tag(LIST_SCOPE, undefined)).toBeUndefined()
      expect(off.generationKey(LIST_SCOPE)).toBeUndefined()
    })))
  })

  it("with shared generations, the tag needs the generation of the scope the read depends on", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      // Generations that are never bumped here: tags only.
      const cache = yield* makeReadCache({
        maxBytes: 1_000_000,
        maxAgeMs: 0,
        shared: { bump: () => Effect.void, onReset: () => Effect.void },
        feed: undefined,
        settled: Effect.void
      })
      expect(cache.generationKey(5)).toEqual({ key: "authors:gen:id:5", record: false })
      expect(cache.generationKey(LIST_SCOPE)).toEqual({ key: "authors:gen:all", record: true })
      expect(cache.tag(5, undefined)).toBeUndefined()
      expect(cache.tag(5, { key: "authors:gen:list", value: "1" })).toBeUndefined()
      const tag = cache.tag(5, { key: "authors:gen:id:5", value: "1" })
      expect(tag).toBeDefined()
      expect(cache.tag(5, { key: "authors:gen:id:5", value: "2" })).not.toBe(tag)
    })))
  })
})

describe("unfiltered pages after an append (Authors.readPage, in process)", () => {
  /** The service on the in-memory repository, counting its page and total statements. */
  const setup = Effect.gen(function*() {
    const statements = { page: 0, total: 0 }
    const Counted = Layer.effect(
      AuthorRepo,
      Effect.gen(function*() {
        const repo = yield* AuthorRepo
        return AuthorRepo.of({
          ...repo,
          page: (filters, request) =>
            Effect.suspend(() => {
              statements.page++
              return repo.page(filters, request)
            }),
          total: Effect.suspend(() => {
            statements.total++
            return repo.total
          })
        })
      })
    ).pipe(Layer.provide(AuthorRepo.layerMemory))
    const cache = yield* memoryCache()
    const context = yield* Layer.build(Authors.layer.pipe(
      Layer.provideMerge(Counted),
      Layer.provide([AuthorEvents.layerNone, Layer.succeed(ReadCache, cache)])
    ))
    const authors = Context.get(context, Authors)
    const repo = Context.get(context, AuthorRepo)
    const read = (perPage: number, page: number, cursor = Option.none<number>()) =>
      authors.readPage({}, { page, perPage, cursor }, cache.tag(LIST_SCOPE, undefined))
    /** The answer from what the repository holds now (not through the cache; counted). */
    const fresh = (perPage: number, page: number, cursor = Option.none<number>()) =>
      Effect.map(authors.paginate({}, { page, perPage, cursor }), (result) => pageAnswer(result, 0))
    return { statements, cache, authors, repo, read, fresh } as const
  })
  const counters = Effect.promise(async () => ({
    hits: (await readCacheHitsTotal.get()).values[0]?.value ?? 0,
    misses: (await readCacheMissesTotal.get()).values[0]?.value ?? 0
  }))

  it("a full page's kept rows serve the page after an append: the total statement runs, not the page's", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const { statements, authors, read, fresh } = yield* setup
      for (let i = 1; i <= 6; i++) yield* authors.create(`Author ${i}`)
      const first = yield* read(2, 1)
      expect(statements).toEqual({ page: 1, total: 0 })
      expect(yield* read(2, 1)).toBe(first) // the answer itself
      expect(statements).toEqual({ page: 1, total: 0 })

      yield* authors.create("Author 7") // an append: the rows of page 1 stand, the total does not
      const before = yield* counters
      const after = yield* read(2, 1)
      expect(statements).toEqual({ page: 1, total: 1 })
      // The rows entry was a hit, the total a miss (its statement); the page answer itself is not counted.
      expect(yield* counters).toEqual({ hits: before.hits + 1, misses: before.misses + 1 })
      expect(after.body).toBe(withTotal(first, totalAnswer(7, 0)).body)
      expect(after.meta).toEqual({ ...first.meta, total: 7, pages: 4 })
      expect(yield* read(2, 1)).toBe(after) // kept under the new tag
      // Another full page shares the total kept by the first: no statement but its own page's.
      yield* read(2, 2)
      expect(statements).toEqual({ page: 2, total: 1 })
      // Byte for byte the answer read whole.
      expect(after.body).toBe((yield* fresh(2, 1)).body) // a page statement, not through the cache

      // A rename (not an append) moves `rows`: the page is read again, with the new name.
      yield* authors.update(2, "Renamed")
      const renamed = yield* read(2, 1)
      expect(statements).toEqual({ page: 4, total: 1 })
      expect(JSON.parse(renamed.dataJson).map((a: { name: string }) => a.name)).toEqual(["Author 1", "Renamed"])
      yield* authors.remove(7) // a delete too
      yield* read(2, 1)
      expect(statements).toEqual({ page: 5, total: 1 })
    })))
  })

  it("pages by cursor are kept the same way", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const { statements, authors, read, fresh } = yield* setup
      for (let i = 1; i <= 6; i++) yield* authors.create(`Author ${i}`)
      yield* read(2, 1, Option.some(2))
      yield* authors.create("Author 7")
      const after = yield* read(2, 1, Option.some(2))
      expect(statements).toEqual({ page: 1, total: 1 })
      expect(after.body).toBe((yield* fresh(2, 1, Option.some(2))).body)
      expect(after.meta).toMatchObject({ total: 7, pages: 4, has_more: true })
    })))
  })

  it("no rows are kept of a page that is not full, nor of one whose next row is above the high-water its reader saw", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const { statements, cache, authors, repo, read, fresh } = yield* setup
      for (let i = 1; i <= 7; i++) yield* authors.create(`Author ${i}`)
      // The last page (not full): after an append it is read again, whole.
      yield* read(3, 3)
      yield* authors.create("Author 8")
      const last = yield* read(3, 3)
      expect(statements).toEqual({ page: 2, total: 0 })
      expect(last.meta).toMatchObject({ total: 8, has_more: false })

      // Author 9 committed, its bump not made yet (high-water still 8): the page 6, 7, 8 has 9 as
      // its next row, above what its reader saw, so its rows are not kept…
      const nine = yield* repo.create("Author 9")
      yield* read(3, 1, Option.some(5))
      // …and 9's bump, an append, leaves `rows` as it was: the page is read whole again.
      yield* cache.written([nine.id], "create", "committed")
      yield* read(3, 1, Option.some(5))
      expect(statements).toEqual({ page: 4, total: 0 })
      // Now the high-water is 9: kept, and the next append costs the total only.
      yield* authors.create("Author 10")
      const page = yield* read(3, 1, Option.some(5))
      expect(statements).toEqual({ page: 4, total: 1 })
      expect(page.body).toBe((yield* fresh(3, 1, Option.some(5))).body)
      expect(page.meta).toMatchObject({ total: 10, pages: 4, has_more: true })
    })))
  })
})

describe("answers", () => {
  const rows = [row(1, "Émile \"Zola\""), row(2, "😀 <b>")]
  const encode = <A>(schema: Schema.Codec<A, unknown>, value: A) => JSON.stringify(Schema.encodeSync(schema)(value))

  it("are byte for byte what Schema encoding gives, with data and meta for the WebSocket", () => {
    const list = listAnswer(rows, 0)
    expect(list.body).toBe(encode(Schema.Array(Author), rows))
    expect(list.dataJson).toBe(list.body)
    const meta = { page: 2, per_page: 2, total: 9, pages: 5, next_cursor: "YToy", has_more: true }
    const page = pageAnswer({ items: rows, meta }, 0)
    expect(page.body).toBe(encode(AuthorPage, { items: rows, meta }))
    expect(page.dataJson).toBe(list.body)
    expect(JSON.parse(page.metaJson)).toEqual(meta)
    expect(page.meta).toEqual(meta)
    expect(authorAnswer(rows[0], 0).body).toBe(encode(Author, rows[0]!))
    expect(authorAnswer(undefined, 0).found).toBe(false)
  })

  it("carry a strong ETag from their content: the same body, the same ETag", () => {
    expect(listAnswer(rows, 0).etag).toBe(listAnswer(rows, 1).etag)
    expect(listAnswer(rows, 0).etag).not.toBe(listAnswer(rows.slice(1), 0).etag)
    expect(listAnswer(rows, 0).etag).toMatch(/^"[A-Za-z0-9_-]{27}"$/)
  })

  it("keys tell every parameter apart (absent, empty, and values with separators)", () => {
    const keys = [
      listKey({}),
      listKey({ name: "" }),
      listKey({ search: "" }),
      listKey({ id: 1 }),
      listKey({ name: "a", search: "b" }),
      listKey({ name: "a=b" }),
      pageKey({}, { page: 1, perPage: 20, cursor: Option.none() }),
      pageKey({}, { page: 1, perPage: 20, cursor: Option.some(1) }),
      pageKey({}, { page: 2, perPage: 20, cursor: Option.none() }),
      authorKey(1)
    ]
    expect(new Set(keys).size).toBe(keys.length)
  })
})

describe("every exit of a write bumps its scopes (Authors `write`)", () => {
  type Fault = "none" | "die" | "interrupt"
  /**
   * The service on the in-memory repository whose writes commit and then fail as `fault` says (a
   * connection lost after the commit, an interruption), with a cache that records its bumps; `gate`
   * holds a rename's statement until it is opened.
   */
  const setup = (fault: Fault, gate?: Deferred.Deferred<void>) =>
    Effect.gen(function*() {
      const bumps: Array<{ ids: ReadonlyArray<number> | undefined; kind: WriteKind; outcome: WriteOutcome }> = []
      const reached = Deferred.makeUnsafe<void>()
      const after = <A, E>(committed: Effect.Effect<A, E>) =>
        Effect.flatMap(committed, (a) => (fault === "die" ? Effect.die(new Error("connection lost after the commit")) : fault === "interrupt" ? Effect.interrupt : Effect.succeed(a)))
      const Faulty = Layer.effect(
        AuthorRepo,
        Effect.gen(function*() {
          const repo = yield* AuthorRepo
          const held = <A, E>(statement: Effect.Effect<A, E>) =>
            gate === undefined ? statement : Effect.andThen(Effect.andThen(Deferred.succeed(reached, undefined), Deferred.await(gate)), statement)
          return AuthorRepo.of({
            ...repo,
            create: (name) => after(repo.create(name)),
            update: (id, name) => after(held(repo.update(id, name))),
            remove: (id) => after(repo.remove(id))
          })
        })
      ).pipe(Layer.provide(AuthorRepo.layerMemory))
      const recording = ReadCache.of({ ...Context.get(yield* Layer.build(ReadCache.layerNone), ReadCache), written: (ids, kind, outcome) => Effect.sync(() => void bumps.push({ ids, kind, outcome })) })
      const context = yield* Layer.build(Authors.layer.pipe(Layer.provideMerge(Faulty), Layer.provide([AuthorEvents.layerNone, Layer.succeed(ReadCache, recording)])))
      return { bumps, reached, authors: Context.get(context, Authors), repo: Context.get(context, AuthorRepo) }
    })
  const run = <A, E>(effect: Effect.Effect<A, E, Scope.Scope>) => Effect.runPromise(Effect.scoped(effect))

  it("answered: bumped as committed; a 409 or a 404: nothing committed, nothing bumped", () =>
    run(Effect.gen(function*() {
      const { bumps, authors } = yield* setup("none")
      const row = yield* authors.create("Ann")
      yield* authors.update(row.id, "Ann Renamed")
      expect(yield* Effect.flip(authors.create("Ann Renamed"))).toBeInstanceOf(AuthorNameTaken)
      expect(yield* Effect.flip(authors.update(99, "Nobody"))).toBeInstanceOf(AuthorNotFound)
      expect(yield* Effect.flip(authors.remove(99))).toBeInstanceOf(AuthorNotFound)
      yield* authors.remove(row.id)
      expect(bumps).toEqual([
        { ids: [row.id], kind: "create", outcome: "committed" },
        { ids: [row.id], kind: "update", outcome: "committed" },
        { ids: [row.id], kind: "delete", outcome: "committed" }
      ])
    })))

  for (const fault of ["die", "interrupt"] as const) {
    it(`committed, then the request ${fault === "die" ? "dies" : "is interrupted"}: bumped as unknown (a create's id unknown)`, () =>
      run(Effect.gen(function*() {
        const { bumps, authors, repo } = yield* setup(fault)
        const created = yield* Effect.exit(authors.create("Bob"))
        expect(Exit.isFailure(created)).toBe(true)
        const [row] = yield* repo.listBatch({}, Option.none())
        yield* Effect.exit(authors.update(row!.id, "Bob Renamed"))
        yield* Effect.exit(authors.remove(row!.id))
        expect(bumps).toEqual([
          { ids: undefined, kind: "create", outcome: "unknown" },
          { ids: [row!.id], kind: "update", outcome: "unknown" },
          { ids: [row!.id], kind: "delete", outcome: "unknown" }
        ])
      })))
  }

  it("a request interrupted while its statement runs (its client went away) waits for the outcome, then bumps", () =>
    run(Effect.gen(function*() {
      const gate = Deferred.makeUnsafe<void>()
      const { bumps, reached, authors, repo } = yield* setup("none", gate)
      const row = yield* authors.create("Cy")
      const fiber = yield* Effect.forkChild(authors.update(row.id, "Cy Renamed"))
      yield* Deferred.await(reached)
      const interrupting = yield* Effect.forkChild(Fiber.interrupt(fiber), { startImmediately: true })
      yield* Effect.yieldNow
      expect(bumps).toHaveLength(1) // only the create's: the rename is still waiting for its statement
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(interrupting)
      expect(Option.getOrThrow(yield* repo.findById(row.id)).name).toBe("Cy Renamed")
      expect(bumps[1]).toEqual({ ids: [row.id], kind: "update", outcome: "committed" })
    })))
})

describe("READ_CACHE_MAX_AGE_SECONDS", () => {
  it("an answer read longer ago than the maximum age is not served, and is dropped; 0 is no limit", () => {
    const store = new AnswerStore(1_000_000, 60_000)
    const answer = listAnswer([row(1)], 1_000)
    store.put("k", "t", answer)
    expect(store.get("k", "t", 61_000)).toBe(answer) // exactly the maximum age
    expect(store.get("k", "t", 61_001)).toBeUndefined()
    expect(store.size).toBe(0)
    const unbounded = new AnswerStore(1_000_000, 0)
    unbounded.put("k", "t", answer)
    expect(unbounded.get("k", "t", Number.MAX_SAFE_INTEGER)).toBe(answer)
  })

  it("a page made from kept rows and a total is as old as the older of the two", () => {
    const rows = pageAnswer({ items: [row(1)], meta: { page: 1, per_page: 1, total: 5, pages: 5, next_cursor: "YTox", has_more: true } }, 1_000)
    expect(withTotal(rows, totalAnswer(6, 5_000)).readAt).toBe(1_000)
    expect(withTotal(rows, totalAnswer(6, 500)).readAt).toBe(500)
  })

  it("through the cache: a read after the maximum age goes to the database again (the cache's clock: Effect's)", async () => {
    let ms = 1_000_000
    const clock = { ...Context.get(Context.empty(), Clock.Clock), monotonicTimeNanosUnsafe: () => BigInt(ms) * 1_000_000n }
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const cache = yield* makeReadCache({ maxBytes: 1_000_000, maxAgeMs: 60_000, shared: undefined, feed: undefined, settled: Effect.void })
      let loads = 0
      const load = Effect.sync(() => listAnswer([row(++loads)], cache.now()))
      const read = () => cache.read("k", cache.tag(LIST_SCOPE, undefined), load)
      yield* read()
      ms += 60_000
      yield* read()
      expect(loads).toBe(1)
      ms += 1
      yield* read()
      expect(loads).toBe(2)
    })).pipe(Effect.provideService(Clock.Clock, clock)))
  })
})

describe("id lookups that miss together are one statement (Authors.ts `lookup`)", () => {
  it("lookups by id and lists filtered by id alone, started together: one statement for their distinct ids, each answered its own row", () =>
    Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const statements: Array<ReadonlyArray<number>> = []
      const Counting = Layer.effect(AuthorRepo, Effect.map(AuthorRepo, (repo) =>
        AuthorRepo.of({ ...repo, findManyById: (ids) => Effect.andThen(Effect.sync(() => void statements.push(ids)), repo.findManyById(ids)) }))
      ).pipe(Layer.provide(AuthorRepo.layerMemory))
      const context = yield* Layer.build(Authors.layer.pipe(Layer.provideMerge(Counting), Layer.provide([AuthorEvents.layerNone, ReadCache.layerNone])))
      const authors = Context.get(context, Authors)
      const rows = yield* Effect.forEach(["Ann", "Bob"], (name) => authors.create(name))
      const reads = yield* Effect.forEach([rows[0]!.id, rows[1]!.id, rows[0]!.id, 99, 3_000_000_000], (id, k) =>
        Effect.forkChild(k % 2 === 0 ? authors.readAuthor(id, undefined) : authors.readList({ id }, undefined), { startImmediately: true }))
      const answers = yield* Effect.forEach(reads, Fiber.join)
      expect(statements).toEqual([[rows[0]!.id, rows[1]!.id, 99]]) // 3,000,000,000: beyond 32 bits, no statement
      expect(answers.map((a) => (a as ReadAnswer).body)).toEqual([
        authorAnswer(rows[0], 0).body,
        listAnswer([rows[1]!], 0).body,
        authorAnswer(rows[0], 0).body,
        listAnswer([], 0).body,
        authorAnswer(undefined, 0).body
      ])
    }))))
})
