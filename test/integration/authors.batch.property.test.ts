/**
 * Every create of a batch is answered as it would be alone (docs/architecture.md#writes-in-batches),
 * over random batches: names drawn from a small pool (so some repeat within a batch, and two differ
 * only by a lone surrogate, stored as U+FFFD), some of them created before the batch, and a fault
 * injected into the batch's statement. Against the real `Authors` service and its real resolver on
 * the embedded database and, with TEST_DATABASE_URL, on PostgreSQL.
 *
 * Each round: an opener create is held in its statement; the batch's creates are started meanwhile,
 * in order (the order received), and wait for it; the opener is let go and the batch is written.
 * The oracle is the same creates run alone one after the other, in that order, from the same rows:
 * a name not yet stored gets 201 with a new id (ids ascending), else 409. Faults of the batch's
 * statement and what each request must then get:
 * - refused (the server refused it: rolled back): the oracle's answer;
 * - unknown, not committed (no answer): the oracle's answer, except that when no request of the
 *   batch was created alone nothing proves the statement wrote nothing: a 409 is then the answer of
 *   a create of unknown outcome (500);
 * - unknown, committed (its answer lost): every request 500, its rows are in the database.
 * Also checked: the rows the database holds after the round, and that every id answered 201 was
 * bumped in the read cache, and a batch of unknown outcome bumped the list as a create of unknown id.
 */
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Redacted, Scope } from "effect"
import type * as SqlClient from "effect/sql/SqlClient"
import * as SqlError from "effect/sql/SqlError"
import * as fc from "fast-check"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AuthorEvents, Authors } from "../../src/Authors/Authors.ts"
import { ReadCache, type WriteKind } from "../../src/Authors/ReadCache.ts"
import { AuthorRepo } from "../../src/Authors/Repo.ts"
import { Database } from "../../src/Db/Database.ts"
import { databaseTimeout } from "../../src/Db/Deadline.ts"
import type { AuthorRow } from "../../src/Domain/Author.ts"
import { AuthorNameTaken } from "../../src/Errors.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

type Fault = "none" | "refused" | "unknown" | "committedUnknown"
const POOL = ["Ann", "Bob", "Cy", "Dee", "Eve \ud800", "Eve \ufffd"]

interface Round {
  readonly before: ReadonlyArray<number>
  readonly batch: ReadonlyArray<number>
  readonly fault: Fault
}
const rounds = fc.record({
  before: fc.uniqueArray(fc.nat(POOL.length - 1), { maxLength: 3 }),
  batch: fc.array(fc.nat(POOL.length - 1), { minLength: 2, maxLength: 8 }),
  fault: fc.constantFrom<Fault>("none", "none", "refused", "unknown", "committedUnknown")
})

/** A refusal as the server words it: an ERROR, and the session went on. */
const refused = () =>
  new SqlError.SqlError({
    reason: new SqlError.ConstraintError({
      cause: Object.assign(new Error("new row violates check constraint"), { severityUnlocalized: "ERROR", code: "23514" }),
      message: "PgConnection: Query failed",
      operation: "query"
    })
  })
const connectionLost = () =>
  new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: new Error("Connection closed"), message: "PgConnection: Connection closed", operation: "query" }) })

/** What a request got, reduced to what the oracle decides. */
type Got = { readonly status: 201; readonly id: number; readonly name: string } | { readonly status: 409 | 500 }
const gotOf = (exit: Exit.Exit<AuthorRow, AuthorNameTaken>): Got => {
  if (Exit.isSuccess(exit)) return { status: 201, id: exit.value.id, name: exit.value.name }
  const error = Cause.findErrorOption(exit.cause)
  return Option.isSome(error) && error.value instanceof AuthorNameTaken ? { status: 409 } : { status: 500 }
}

type DatabaseLayer = Layer.Layer<SqlClient.SqlClient, unknown>

const world = async (database: DatabaseLayer) => {
  const scope = Effect.runSync(Scope.make())
  const gate = { held: undefined as Deferred.Deferred<void> | undefined, fault: "none" as Fault, reached: Deferred.makeUnsafe<void>() }
  const bumps: Array<{ readonly ids: ReadonlyArray<number> | undefined; readonly kind: WriteKind }> = []
  const Faulty = Layer.effect(AuthorRepo, Effect.gen(function*() {
    const repo = yield* AuthorRepo
    const held = <A, E>(statement: Effect.Effect<A, E>) =>
      Effect.suspend(() => {
        const wait = gate.held
        if (wait === undefined) return statement
        gate.held = undefined
        return Effect.andThen(Effect.andThen(Deferred.succeed(gate.reached, undefined), Deferred.await(wait)), statement)
      })
    return AuthorRepo.of({
      ...repo,
      create: (name) => held(repo.create(name)),
      createMany: (names) =>
        Effect.suspend(() => {
          const fault = gate.fault
          gate.fault = "none"
          switch (fault) {
            case "none":
              return repo.createMany(names)
            case "refused":
              return Effect.fail(refused())
            case "unknown":
              return Effect.fail(databaseTimeout("statement", 5_000))
            case "committedUnknown":
              return Effect.andThen(repo.createMany(names), Effect.fail(connectionLost()))
          }
        })
    })
  })).pipe(Layer.provide(AuthorRepo.layer))
  const recording = Layer.succeed(ReadCache, ReadCache.of({
    ...Context.get(await Effect.runPromise(Layer.build(ReadCache.layerNone).pipe(Scope.provide(scope))), ReadCache),
    written: (ids, kind) => Effect.sync(() => void bumps.push({ ids, kind }))
  }))
  const context = await Effect.runPromise(
    Layer.build(Authors.layer.pipe(Layer.provideMerge(Faulty), Layer.provide([AuthorEvents.layerNone, recording]), Layer.provide(database)))
      .pipe(Scope.provide(scope))
  )
  return { scope, gate, bumps, authors: Context.get(context, Authors), repo: Context.get(context, AuthorRepo) }
}

const property = (databaseOf: () => Promise<{ readonly layer: DatabaseLayer; readonly dispose: () => Promise<void> }>) => {
  let w: Awaited<ReturnType<typeof world>>
  let dispose: () => Promise<void>
  beforeAll(async () => {
    const db = await databaseOf()
    dispose = db.dispose
    w = await world(db.layer)
  }, 120_000)
  afterAll(async () => {
    await Effect.runPromise(Scope.close(w.scope, Exit.void))
    await dispose()
  })

  let run = 0
  const round = async ({ before, batch, fault }: Round) => {
    const prefix = `r${++run} `
    const name = (i: number) => `${prefix}${POOL[i]!}`
    const stored = (i: number) => name(i).toWellFormed()
    for (const i of before) await Effect.runPromise(Effect.exit(w.authors.create(name(i)))) // the two Eves: one stored
    const start = w.bumps.length
    // The opener, held in its statement; the batch's creates wait for it, in order.
    w.gate.held = Deferred.makeUnsafe<void>()
    w.gate.reached = Deferred.makeUnsafe<void>()
    const release = w.gate.held
    const opener = Effect.runFork(w.authors.create(`${prefix}opener`))
    await Effect.runPromise(Deferred.await(w.gate.reached))
    // Started one after the other, each running until it waits: received in this order.
    const members = Effect.runSync(Effect.forEach(batch, (i) => Effect.forkDetach(Effect.exit(w.authors.create(name(i))), { startImmediately: true })))
    w.gate.fault = fault
    Effect.runSync(Deferred.succeed(release, undefined))
    await Effect.runPromise(Fiber.join(opener))
    const got = await Promise.all(members.map((member) => Effect.runPromise(Fiber.join(member)).then(gotOf)))

    // The oracle: each create alone, in order, from the rows before.
    const rows = new Set(before.map(stored))
    const alone = batch.map((i): Got["status"] => {
      if (rows.has(stored(i))) return 409
      rows.add(stored(i))
      return 201
    })
    const committed = fault === "committedUnknown"
    const proven = fault === "none" || fault === "refused" || (fault === "unknown" && alone.includes(201))
    const expected = alone.map((status) => (committed ? 500 : !proven && status === 409 ? 500 : status))
    expect(got.map((g) => g.status), JSON.stringify({ batch: batch.map((i) => POOL[i]), fault })).toEqual(expected)
    const created = got.flatMap((g, k) => (g.status === 201 ? [{ ...g, k }] : []))
    for (const c of created) expect(c.name).toBe(stored(batch[c.k]!))
    const ids = created.map((c) => c.id)
    expect(ids, "ids in the order received").toEqual([...ids].sort((x, y) => x - y))
    // The rows stored: the ones before, the opener, and the batch's (as the oracle makes them).
    const inDatabase = (await Effect.runPromise(w.repo.listBatch({ search: prefix }, Option.none())))
      .map((row) => row.name).filter((n) => n.startsWith(prefix))
    expect(new Set(inDatabase)).toEqual(new Set([...rows, `${prefix}opener`]))
    // The read cache: every id answered 201 bumped; a batch of unknown outcome bumped as a create of unknown id.
    const bumped = w.bumps.slice(start)
    for (const id of ids) expect(bumped.some((b) => b.ids?.includes(id)), `id ${id} bumped`).toBe(true)
    if (fault === "unknown" || committed) expect(bumped).toContainEqual({ ids: undefined, kind: "create" })
  }

  it("each create of a random batch gets what it would alone, with faults of the batch's statement", async () => {
    await fc.assert(fc.asyncProperty(rounds, round), {
      numRuns: 60,
      examples: [
        // Duplicates, a name stored before, the two names stored alike, with each fault.
        ...(["none", "refused", "unknown", "committedUnknown"] as const).map((fault) => [{ before: [2], batch: [0, 1, 0, 2, 4, 5], fault }] as [Round]),
        // Every create's name taken: nothing created alone proves the statement wrote nothing.
        [{ before: [0, 1], batch: [0, 1, 1], fault: "unknown" }]
      ]
    })
  }, 120_000)
}

describe("on the embedded database", () => {
  property(async () => {
    const dir = mkdtempSync(join(tmpdir(), "ads-batch-"))
    return {
      layer: Database.layerEmbedded(join(dir, "pgdata"), 5),
      dispose: async () => rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("on PostgreSQL", () => {
  property(async () => {
    const db: TestDatabase = await createPostgresDatabase(TEST_DATABASE_URL!)
    return { layer: Database.layer(Redacted.make(db.url!), 5), dispose: db.dispose }
  })
})
