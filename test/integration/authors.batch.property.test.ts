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
 * Renames and deletes the same way (`changeRound`: chains of names, swaps, a rename and a delete of
 * one row, the same delete twice).
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
import type { WriteKind } from "../../src/Authors/Generations.ts"
import { noReadCache, ReadCache } from "../../src/Authors/ReadCache.ts"
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

/** A rename (to one of the round's names) or a delete, of one of the round's rows (or of none: `row` past them). */
interface ChangeOp {
  readonly row: number
  /** An index into the round's names; undefined: a delete. */
  readonly name: number | undefined
}
interface ChangeRound {
  readonly batch: ReadonlyArray<ChangeOp>
  readonly fault: Fault
}
/** Rows per round, and names: theirs and two new ones. */
const ROWS = 3
const NAMES = ROWS + 2
const changeRounds = fc.record({
  batch: fc.array(fc.record({ row: fc.nat(ROWS), name: fc.option(fc.nat(NAMES - 1), { nil: undefined }) }), { minLength: 2, maxLength: 8 }),
  fault: fc.constantFrom<Fault>("none", "none", "refused", "unknown", "committedUnknown")
})

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
    /** The batch's statement, with the round's fault. */
    const faulty = <A>(statement: Effect.Effect<A, SqlError.SqlError>) =>
      Effect.suspend((): Effect.Effect<A, SqlError.SqlError> => {
        const fault = gate.fault
        gate.fault = "none"
        switch (fault) {
          case "none":
            return statement
          case "refused":
            return Effect.fail(refused())
          case "unknown":
            return Effect.fail(databaseTimeout("statement", 5_000))
          case "committedUnknown":
            // The statement ran (written, or refused by the server), then its answer was lost.
            return Effect.andThen(Effect.exit(statement), Effect.fail(connectionLost()))
        }
      })
    return AuthorRepo.of({
      ...repo,
      create: (name) => held(repo.create(name)),
      update: (id, name) => held(repo.update(id, name)),
      createMany: (names) => faulty(repo.createMany(names)),
      changeMany: (changes) => faulty(repo.changeMany(changes))
    })
  })).pipe(Layer.provide(AuthorRepo.layer))
  const recording = Layer.succeed(ReadCache, ReadCache.of({
    ...noReadCache,
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

  /**
   * Renames and deletes: the oracle is the same changes alone, in order, from the same rows (a
   * rename: 404 without its row, 409 when another row holds the name, else 200; a delete: 404 or
   * its row). Refused: the oracle's answers. Of unknown outcome: every change the database error
   * (a rename written again would succeed whether or not the statement wrote it).
   */
  const changeRound = async (round: ChangeRound) => {
    const { fault } = round
    const unknown = fault === "unknown" || fault === "committedUnknown"
    // A batch is written as runs of distinct rows (a run of one alone): an unknown outcome is
    // checked on a batch of one run, whose statement the fault hits.
    const batch = unknown ? round.batch.filter((op, k) => round.batch.findIndex((o) => o.row === op.row) === k) : round.batch
    if (unknown && batch.length < 2) return
    const prefix = `c${++run} `
    const names = Array.from({ length: NAMES }, (_, k) => `${prefix}name ${k}`)
    const ids: Array<number> = []
    for (let k = 0; k < ROWS; k++) ids.push((await Effect.runPromise(w.authors.create(names[k]!))).id)
    const idOf = (row: number) => ids[row] ?? 2_000_000_000 + row // past the round's rows: no author
    const opener = (await Effect.runPromise(w.authors.create(`${prefix}opener`))).id
    const start = w.bumps.length
    w.gate.held = Deferred.makeUnsafe<void>()
    w.gate.reached = Deferred.makeUnsafe<void>()
    const release = w.gate.held
    const opening = Effect.runFork(w.authors.update(opener, `${prefix}opened`))
    await Effect.runPromise(Deferred.await(w.gate.reached))
    const members = Effect.runSync(Effect.forEach(batch, (op) =>
      Effect.forkDetach(Effect.exit(op.name === undefined ? w.authors.remove(idOf(op.row)) : w.authors.update(idOf(op.row), names[op.name]!)), { startImmediately: true })))
    w.gate.fault = fault
    Effect.runSync(Deferred.succeed(release, undefined))
    await Effect.runPromise(Fiber.join(opening))
    const got = await Promise.all(members.map((member) => Effect.runPromise(Fiber.join(member)).then((exit) => {
      if (Exit.isSuccess(exit)) return { status: 200, name: exit.value.name }
      const error = Cause.findErrorOption(exit.cause)
      return Option.isSome(error) ? { status: error.value instanceof AuthorNameTaken ? 409 : 404 } : { status: 500 }
    })))

    // The oracle.
    const rows = new Map(ids.map((id, k) => [id, names[k]!]))
    const alone = batch.map((op) => {
      const id = idOf(op.row)
      const current = rows.get(id)
      if (current === undefined) return { status: 404 }
      if (op.name === undefined) {
        rows.delete(id)
        return { status: 200, name: current }
      }
      const name = names[op.name]!
      if ([...rows].some(([other, held]) => other !== id && held === name)) return { status: 409 }
      rows.set(id, name)
      return { status: 200, name }
    })
    const context = JSON.stringify({ batch, fault })
    expect(got, context).toEqual(unknown ? alone.map(() => ({ status: 500 })) : alone)
    const bumped = w.bumps.slice(start)
    if (unknown) {
      for (const op of batch) if (ids[op.row] !== undefined) expect(bumped.some((b) => b.ids?.includes(idOf(op.row))), context).toBe(true)
      return
    }
    const inDatabase = (await Effect.runPromise(w.repo.listBatch({ search: prefix }, Option.none()))).filter((row) => row.id !== opener)
    expect(new Map(inDatabase.map((row) => [row.id, row.name])), context).toEqual(rows)
    for (const [k, op] of batch.entries()) if (got[k]!.status === 200) expect(bumped.some((b) => b.ids?.includes(idOf(op.row))), context).toBe(true)
  }

  it("each rename and delete of a random batch gets what it would alone, with faults of the batch's statement", async () => {
    await fc.assert(fc.asyncProperty(changeRounds, changeRound), {
      numRuns: 60,
      examples: [
        // A chain in both orders (0 takes 1's name, 1 moves away), a swap, a rename and a delete of one row, twice the same delete.
        [{ batch: [{ row: 0, name: 1 }, { row: 1, name: 3 }], fault: "none" }],
        [{ batch: [{ row: 1, name: 3 }, { row: 0, name: 1 }], fault: "none" }],
        [{ batch: [{ row: 0, name: 1 }, { row: 1, name: 0 }], fault: "none" }],
        [{ batch: [{ row: 0, name: 3 }, { row: 0, name: undefined }, { row: 0, name: 4 }], fault: "none" }],
        [{ batch: [{ row: 2, name: undefined }, { row: 2, name: undefined }, { row: 1, name: 2 }], fault: "none" }],
        [{ batch: [{ row: 0, name: 3 }, { row: 1, name: 3 }, { row: 3, name: 4 }], fault: "none" }],
        [{ batch: [{ row: 0, name: 1 }, { row: 1, name: undefined }, { row: 2, name: 1 }], fault: "refused" }]
      ]
    })
  }, 120_000)

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
