/**
 * One contract suite for both `AuthorRepo` implementations: PostgreSQL (embedded, the very SQL
 * of production) and in memory (the handler tests' stand-in, test/unit/authors.handlers.test.ts).
 * Whatever the handler tests rely on the memory repository for is asserted of both here.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Option } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as App from "../../src/App.ts"
import { AuthorRepo } from "../../src/Authors/Repo.ts"
import { AppConfig } from "../../src/Config.ts"
import { seedEmbeddedDatabase } from "../support/TestApp.ts"

const names = (rows: ReadonlyArray<{ readonly name: string }>) => rows.map((r) => r.name)

const contract = (name: string, layer: () => Layer.Layer<AuthorRepo>) =>
  describe(`AuthorRepo contract: ${name}`, () => {
    it.live("create, find, rename, remove; unique names and not-found as the service's errors", () =>
      Effect.gen(function*() {
        const repo = yield* AuthorRepo
        const a = yield* repo.create("Ursula")
        expect(a.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/)
        expect(yield* repo.findById(a.id)).toEqual(Option.some(a))
        expect(yield* repo.findById(2_147_483_648)).toEqual(Option.none())
        const taken = yield* Effect.flip(repo.create("Ursula"))
        expect(taken).toMatchObject({ _tag: "AuthorNameTaken", detail: "Author with name Ursula already exists" })
        const b = yield* repo.create("ursula")
        expect(yield* repo.update(a.id, "Ursula")).toEqual(a)
        expect(yield* Effect.flip(repo.update(b.id, "Ursula"))).toMatchObject({ _tag: "AuthorNameTaken" })
        expect(yield* Effect.flip(repo.update(b.id + 1000, "x"))).toMatchObject({ _tag: "AuthorNotFound", detail: `Author with ID ${b.id + 1000} not found` })
        expect(yield* repo.update(b.id, "Octavia")).toEqual({ ...b, name: "Octavia" })
        expect(yield* repo.remove(b.id)).toEqual({ ...b, name: "Octavia" })
        expect(yield* Effect.exit(repo.remove(b.id))).toMatchObject(Exit.fail({ _tag: "AuthorNotFound" }))
        expect(yield* repo.findById(b.id)).toEqual(Option.none())
      }).pipe(Effect.provide(layer())))

    it.live("filters (id, exact name, case-insensitive search with literal % and _), order by id, batches after an id", () =>
      Effect.gen(function*() {
        const repo = yield* AuthorRepo
        const rows = yield* Effect.forEach(["Le Guin", "Butler", "le carré", "100% Banks", "a_b"], (n) => repo.create(n))
        expect(names(yield* repo.listBatch({}, Option.none()))).toEqual(["Le Guin", "Butler", "le carré", "100% Banks", "a_b"])
        expect(names(yield* repo.listBatch({ search: "LE" }, Option.none()))).toEqual(["Le Guin", "Butler", "le carré"])
        expect(names(yield* repo.listBatch({ search: "%" }, Option.none()))).toEqual(["100% Banks"])
        expect(names(yield* repo.listBatch({ search: "_" }, Option.none()))).toEqual(["a_b"])
        expect(names(yield* repo.listBatch({ name: "butler" }, Option.none()))).toEqual([])
        expect(names(yield* repo.listBatch({ id: rows[1]!.id, search: "le" }, Option.none()))).toEqual(["Butler"])
        expect(names(yield* repo.listBatch({}, Option.some(rows[2]!.id)))).toEqual(["100% Banks", "a_b"])
      }).pipe(Effect.provide(layer())))

    it.live("pages by offset and by cursor, with the total of the filtered rows and the id of the row after a full page; the total alone", () =>
      Effect.gen(function*() {
        const repo = yield* AuthorRepo
        const rows = yield* Effect.forEach(["a", "b", "c", "d", "e"], (n) => repo.create(n))
        const second = yield* repo.page({}, { page: 2, perPage: 2, afterId: Option.none() })
        expect({ ...second, items: names(second.items) }).toEqual({ items: ["c", "d"], total: 5, hasMore: true, lastId: rows[4]!.id })
        const last = yield* repo.page({}, { page: 3, perPage: 2, afterId: Option.none() })
        expect({ ...last, items: names(last.items) }).toEqual({ items: ["e"], total: 5, hasMore: false })
        expect(yield* repo.page({}, { page: 9, perPage: 2, afterId: Option.none() })).toEqual({ items: [], total: 5, hasMore: false })
        const after = yield* repo.page({}, { page: 1, perPage: 2, afterId: Option.some(rows[1]!.id) })
        expect({ ...after, items: names(after.items) }).toEqual({ items: ["c", "d"], total: 5, hasMore: true, lastId: rows[4]!.id })
        const filtered = yield* repo.page({ search: "D" }, { page: 1, perPage: 2, afterId: Option.none() })
        expect({ ...filtered, items: names(filtered.items) }).toEqual({ items: ["d"], total: 1, hasMore: false })
        expect(yield* repo.total).toBe(5)
        yield* repo.remove(rows[0]!.id)
        expect(yield* repo.total).toBe(4)
      }).pipe(Effect.provide(layer())))
  })

contract("in memory", () => AuthorRepo.layerMemory)

/** A fresh embedded database per test (from the migrated template, when the suite made one). */
contract("PostgreSQL (embedded)", () =>
  Layer.unwrap(Effect.acquireRelease(
    Effect.sync(() => {
      const dataDir = mkdtempSync(join(tmpdir(), "ads-repo-"))
      seedEmbeddedDatabase(dataDir)
      return dataDir
    }),
    (dataDir) => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true }))
  ).pipe(Effect.map((dataDir) =>
    AuthorRepo.layer.pipe(Layer.provide(App.layerDatabase), Layer.provide(AppConfig.layerTest({ dataDir })), Layer.orDie)
  ))))
