/**
 * Every PostgreSQL call has a deadline (Db/Instrumentation.ts, DATABASE_STATEMENT_TIMEOUT_SECONDS):
 * the service's client on a real server behind a TCP proxy. Blackholed (the server accepts and
 * never answers: no error reveals it), a statement, a wait for a connection and a transaction
 * each fail with the database's ordinary error — a `SqlError` (ConnectionError) the HTTP layer
 * answers 500 and the audit writer retries — counted as `db_errors_total{error_type="timeout"}`;
 * the broken connections are discarded, so after the restore the same pool serves again, and
 * closing it waits no longer than the deadline of a statement still in flight. On a healthy server a statement
 * that runs too long is stopped (PostgreSQL's own `statement_timeout` is set for every session)
 * and the pool goes on; the migrations' way out (no deadline, `SET LOCAL statement_timeout = 0`)
 * lets a long statement finish. Each case prints its figures.
 */
import { Effect, Exit, Layer, Redacted, Scope } from "effect"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "effect/sql/SqlClient"
import * as SqlError from "effect/sql/SqlError"
import { afterEach, describe, expect, it } from "vitest"
import { Database } from "../../src/Db/Database.ts"
import { DatabaseTimeout, StatementTimeoutMs } from "../../src/Db/Deadline.ts"
import { dbErrorsTotal } from "../../src/Observability/Metrics.ts"
import { readMetric } from "../support/Metrics.ts"
import { hostPort, startTcpProxy, type TcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { createPostgresDatabase, TEST_DATABASE_URL } from "../support/TestApp.ts"

const DEADLINE_MS = 1_000

const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/** A SqlClient (pool of `poolSize`) on a fresh database behind a proxy; closed by the test's cleanup unless the test closes it. */
const client = async (poolSize = 2) => {
  const db = await createPostgresDatabase(TEST_DATABASE_URL!)
  const { host, port } = hostPort(db.url!)
  const proxy: TcpProxy = await startTcpProxy(host, port)
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(Database.layer(Redacted.make(viaProxy(db.url!, proxy)), poolSize, { prepare: true, statementTimeoutMs: DEADLINE_MS }), scope)
  )
  let closed = false
  const close = async () => {
    if (closed) return
    closed = true
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
  cleanups.push(async () => {
    await close()
    await proxy.close()
    await db.dispose()
  })
  /** Runs `f` with the client; resolves with its exit and how long it took. */
  const run = async <A>(f: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown, PgClient.PgClient>) => {
    const started = performance.now()
    const exit = await Effect.runPromiseExit(Effect.flatMap(SqlClient.SqlClient, f).pipe(Effect.provide(context)))
    return { exit, ms: Math.round(performance.now() - started) }
  }
  return { proxy, run, close }
}

/** The `DatabaseTimeout` phase of a failure, or what else it failed with. */
const failure = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return "success"
  const error = exit.cause.reasons.find((r) => r._tag === "Fail")
  if (error === undefined || error._tag !== "Fail") return "not a failure"
  const e = error.error
  if (!SqlError.isSqlError(e)) return "not a SqlError"
  return e.reason.cause instanceof DatabaseTimeout ? `${e.reason._tag}: ${e.reason.cause.phase} timeout` : `${e.reason._tag}: ${e.message}`
}

const timeouts = async () =>
  (await readMetric(dbErrorsTotal)).sum("db_errors_total", { error_type: "timeout" })

describe.runIf(TEST_DATABASE_URL !== undefined)("PostgreSQL deadlines", () => {
  it("blackholed: statement, wait for a connection and transaction fail with the database error; the pool serves again after the restore", async () => {
    const { proxy, run, close } = await client(2)
    // Both connections open: one for the transaction below, one for the statement.
    const warm = await Promise.all([run((sql) => sql`SELECT 1 AS one FROM pg_sleep(0.1)`), run((sql) => sql`SELECT 1 AS one FROM pg_sleep(0.1)`)])
    for (const w of warm) expect(w.exit).toEqual(Exit.succeed([{ one: 1 }]))
    const counted = await timeouts()
    // A transaction that began before the blackhole: its next statement meets it.
    let blackholed: () => void = () => {}
    const whenBlackholed = new Promise<void>((resolve) => (blackholed = resolve))
    const transaction = run((sql) =>
      sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT 1`
        yield* Effect.promise(() => whenBlackholed)
        return yield* sql`SELECT 2`
      }))
    )
    proxy.blackhole()
    blackholed()
    const statement = await run((sql) => sql`SELECT 1`)
    // NOTIFY is a statement like any other (Db/Instrumentation.ts): bounded too.
    const notify = await run(() => Effect.flatMap(PgClient.PgClient, (pg) => pg.notify("ads_deadline", "x")))
    const inTransaction = await transaction
    // The pool's two connections are gone; these wait for new ones, which never answer.
    const crowd = await Promise.all([run((sql) => sql`SELECT 1`), run((sql) => sql`SELECT 2`), run((sql) => sql.withTransaction(sql`SELECT 3`))])
    const countedNow = (await timeouts()) - counted
    console.log(
      `[db] blackholed: statement ${failure(statement.exit)} after ${statement.ms} ms; a transaction's statement ` +
        `${failure(inTransaction.exit)} (transaction ended after ${inTransaction.ms} ms); three more at once: ` +
        `${crowd.map((c) => `${failure(c.exit)} after ${c.ms} ms`).join(", ")}; db_errors_total{error_type="timeout"} +${countedNow}`
    )
    expect(failure(statement.exit)).toBe("ConnectionError: statement timeout")
    expect(failure(notify.exit)).toMatch(/^ConnectionError: (statement|acquire) timeout$/)
    expect(failure(inTransaction.exit)).toBe("ConnectionError: statement timeout")
    for (const c of crowd) expect(failure(c.exit)).toMatch(/^ConnectionError: (statement|acquire) timeout$/)
    expect(countedNow).toBeGreaterThanOrEqual(6)

    await proxy.restore()
    // The first attempt may meet a connection the restore cut while it opened; then it serves.
    let again = await run((sql) => sql`SELECT 1 AS one`)
    for (let attempt = 0; attempt < 5 && Exit.isFailure(again.exit); attempt++) again = await run((sql) => sql`SELECT 1 AS one`)
    expect(again.exit).toEqual(Exit.succeed([{ one: 1 }]))
    expect((await run((sql) => sql.withTransaction(sql`SELECT 2 AS two`))).exit).toEqual(Exit.succeed([{ two: 2 }]))

    // Blackholed again with a statement in flight: closing the pool waits for it at most until its deadline.
    proxy.blackhole()
    const inFlight = run((sql) => sql`SELECT 1`)
    const started = performance.now()
    await close()
    const closeMs = Math.round(performance.now() - started)
    console.log(`[db] pool closed after ${closeMs} ms with a statement in flight on a blackholed connection; it ended ${failure((await inFlight).exit)}`)
    expect(Exit.isFailure((await inFlight).exit)).toBe(true)
  })

  it("healthy server: a statement that runs too long is stopped (PostgreSQL's statement_timeout is set), and the pool goes on", async () => {
    const { run } = await client(1)
    const setting = await run((sql) => sql<{ statement_timeout: string }>`SHOW statement_timeout`)
    const slow = await run((sql) => sql`SELECT pg_sleep(${(DEADLINE_MS * 3) / 1000})`)
    const after = await run((sql) => sql`SELECT 1 AS one`)
    console.log(`[db] statement_timeout ${JSON.stringify(Exit.isSuccess(setting.exit) ? setting.exit.value : setting.exit)}; pg_sleep(3) ${failure(slow.exit)} after ${slow.ms} ms; next statement ${failure(after.exit)}`)
    expect(setting.exit).toEqual(Exit.succeed([{ statement_timeout: "1s" }]))
    expect(failure(slow.exit)).toMatch(/^(ConnectionError: statement timeout|UnknownError: .*)$/)
    expect(after.exit).toEqual(Exit.succeed([{ one: 1 }]))
  })

  it("without a deadline (the migrations: StatementTimeoutMs Infinity, SET LOCAL statement_timeout = 0) a long statement finishes", async () => {
    const { run } = await client(1)
    const long = await run((sql) =>
      sql.withTransaction(Effect.andThen(sql`SET LOCAL statement_timeout = 0`, sql`SELECT 1 AS done FROM pg_sleep(${(DEADLINE_MS * 2) / 1000})`))
        .pipe(Effect.provideService(StatementTimeoutMs, Infinity))
    )
    console.log(`[db] no deadline: pg_sleep(2) ${failure(long.exit)} after ${long.ms} ms`)
    expect(long.exit).toEqual(Exit.succeed([{ done: 1 }]))
  })
})
