/**
 * The read cache's parts (src/Authors/ReadCache.ts, ReadAnswers.ts): the byte-bounded LRU, the tag
 * logic (which writes change which reads' tags), the in-process cache end to end, and the answers'
 * text (byte for byte what Schema encoding gives, the same ETag for the same body).
 */
import { Effect, Option, Schema } from "effect"
import { describe, expect, it } from "vitest"
import {
  authorAnswer,
  authorKey,
  listAnswer,
  listKey,
  pageAnswer,
  pageKey,
  ReadAnswer,
  textBytes
} from "../../src/Authors/ReadAnswers.ts"
import {
  AnswerStore,
  ID_SHARDS,
  ENTRY_OVERHEAD_BYTES,
  generationKeyOf,
  LIST_SCOPE,
  LocalEpochs,
  makeReadCache,
  scopeOf,
  scopeOfId
} from "../../src/Authors/ReadCache.ts"
import { Author, AuthorPage } from "../../src/Domain/Author.ts"

const row = (id: number, name = `Author ${id}`) => ({ id, name, created_at: "2026-01-31T12:00:00.000000" })
const answerOf = (bytes: number) => listAnswer([row(1, "x".repeat(Math.max(0, bytes - 60)))])
const sizeOf = (key: string, answer: ReadAnswer) => textBytes(answer.body) + key.length * 2 + ENTRY_OVERHEAD_BYTES

describe("AnswerStore (LRU by bytes)", () => {
  it("serves an answer only under the tag it was stored with, and drops it otherwise", () => {
    const store = new AnswerStore(1_000_000)
    const answer = answerOf(200)
    store.put("k", "t1", answer)
    expect(store.get("k", "t1")).toBe(answer)
    expect(store.get("k", "t2")).toBeUndefined()
    expect(store.get("k", "t1")).toBeUndefined() // the stale one was dropped
    expect(store.bytes).toBe(0)
  })

  it("never holds more than its bound, evicting the least recently used first", () => {
    const bound = 20_000
    const store = new AnswerStore(bound)
    const answers = Array.from({ length: 40 }, (_, i) => [`k${i}`, answerOf(900 + i)] as const)
    for (const [key, answer] of answers.slice(0, 3)) store.put(key, "t", answer)
    store.get("k0", "t") // k0 used: k1 is now the least recently used
    for (const [key, answer] of answers.slice(3)) {
      store.put(key, "t", answer)
      expect(store.bytes).toBeLessThanOrEqual(bound)
    }
    expect(store.get("k1", "t")).toBeUndefined()
    expect(store.get("k39", "t")).toBe(answers[39]![1])
    // The count is exact: the sum of what is held.
    const held = answers.filter(([key]) => store.get(key, "t") !== undefined)
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
    expect(generationKeyOf(LIST_SCOPE)).toBe("authors:gen:list")
    expect(generationKeyOf(7)).toBe("authors:gen:id:7")
  })

  it("a write of id 5 changes the list's tag and shard 5's, and no other shard's", () => {
    const epochs = new LocalEpochs(true)
    const before = Array.from({ length: ID_SHARDS + 1 }, (_, scope) => epochs.tag(scope, undefined))
    epochs.written(5)
    const after = Array.from({ length: ID_SHARDS + 1 }, (_, scope) => epochs.tag(scope, undefined))
    const changed = after.flatMap((tag, scope) => (tag !== before[scope] ? [scope] : []))
    expect(changed).toEqual([5, LIST_SCOPE])
  })

  it("a notification of outside writes changes the ids' shards and the list; `all` or garbage changes every scope", () => {
    const epochs = new LocalEpochs(true)
    const snapshot = () => Array.from({ length: ID_SHARDS + 1 }, (_, scope) => epochs.tag(scope, "g"))
    let before = snapshot()
    epochs.changed(`1,${ID_SHARDS + 2},3`)
    let after = snapshot()
    expect(after.flatMap((t, s) => (t !== before[s] ? [s] : []))).toEqual([1, 2, 3, LIST_SCOPE])
    for (const payload of ["all", "", "1,x", "1;DROP"]) {
      before = snapshot()
      epochs.changed(payload)
      after = snapshot()
      expect(after.every((t, s) => t !== before[s]), payload).toBe(true)
    }
  })

  it("the shared generation is part of the tag: another value is another tag", () => {
    const epochs = new LocalEpochs(true)
    expect(epochs.tag(3, "100")).not.toBe(epochs.tag(3, "101"))
    expect(epochs.tag(3, "100")).toBe(epochs.tag(3, "100"))
  })
})

const memoryCache = (maxBytes = 1_000_000) =>
  makeReadCache({ maxBytes, redis: undefined, feed: undefined, notify: () => Effect.void })

describe("the in-process cache", () => {
  it("answers a second read from memory, and a read after a write of that scope from the database", async () => {
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const cache = yield* memoryCache()
      let loads = 0
      const load = Effect.sync(() => {
        loads++
        return listAnswer([row(loads)])
      })
      const readId = (id: number) => cache.read(listKey({ id }), cache.tag(scopeOfId(id), undefined), load)
      const first = yield* readId(5)
      expect(yield* readId(5)).toBe(first)
      expect(loads).toBe(1)
      yield* cache.written(70) // another shard: untouched
      expect(yield* readId(5)).toBe(first)
      yield* cache.written(ID_SHARDS + 5) // shard 5
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
        return listAnswer([row(1)])
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
      const answerLoad = Effect.sync(() => listAnswer([row(++loads)]))
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
      // A client that is never called: tags only.
      const cache = yield* makeReadCache({
        maxBytes: 1_000_000,
        redis: { client: { status: "ready", defineCommand: () => {}, adsBumpGenerations: () => Promise.resolve(1) } as never, prefix: "p:" },
        feed: undefined,
        notify: () => Effect.void
      })
      expect(cache.generationKey(5)).toBe("authors:gen:id:5")
      expect(cache.tag(5, undefined)).toBeUndefined()
      expect(cache.tag(5, { key: "authors:gen:list", value: "1" })).toBeUndefined()
      const tag = cache.tag(5, { key: "authors:gen:id:5", value: "1" })
      expect(tag).toBeDefined()
      expect(cache.tag(5, { key: "authors:gen:id:5", value: "2" })).not.toBe(tag)
    })))
  })
})

describe("answers", () => {
  const rows = [row(1, "Émile \"Zola\""), row(2, "😀 <b>")]
  const encode = <A>(schema: Schema.Codec<A, unknown>, value: A) => JSON.stringify(Schema.encodeSync(schema)(value))

  it("are byte for byte what Schema encoding gives, with data and meta for the WebSocket", () => {
    const list = listAnswer(rows)
    expect(list.body).toBe(encode(Schema.Array(Author), rows))
    expect(list.dataJson).toBe(list.body)
    const meta = { page: 2, per_page: 2, total: 9, pages: 5, next_cursor: "YToy", has_more: true }
    const page = pageAnswer({ items: rows, meta })
    expect(page.body).toBe(encode(AuthorPage, { items: rows, meta }))
    expect(page.dataJson).toBe(list.body)
    expect(JSON.parse(page.metaJson)).toEqual(meta)
    expect(page.meta).toEqual(meta)
    expect(authorAnswer(rows[0]).body).toBe(encode(Author, rows[0]!))
    expect(authorAnswer(undefined).found).toBe(false)
  })

  it("carry a strong ETag from their content: the same body, the same ETag", () => {
    expect(listAnswer(rows).etag).toBe(listAnswer(rows).etag)
    expect(listAnswer(rows).etag).not.toBe(listAnswer(rows.slice(1)).etag)
    expect(listAnswer(rows).etag).toMatch(/^"[A-Za-z0-9_-]{27}"$/)
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

describe("the trigger of outside writes", () => {
  it("skips exactly the service's own sessions (its application_name)", async () => {
    const { readFileSync } = await import("node:fs")
    const { APPLICATION_NAME } = await import("../../src/Db/Database.ts")
    const sql = readFileSync(new URL("../../migrations/0005_authors_notify.sql", import.meta.url), "utf8")
    const names = [...sql.matchAll(/IS DISTINCT FROM '([^']*)'/g)].map((m) => m[1])
    expect(names).toEqual([APPLICATION_NAME, APPLICATION_NAME, APPLICATION_NAME, APPLICATION_NAME])
  })
})
