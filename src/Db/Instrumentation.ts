/**
 * Database metrics (docs/operations.md#metrics--get-metrics): `db_query_duration_seconds{operation}`,
 * `db_connections_active` and `db_errors_total{operation,error_type}`, recorded at the one place
 * every statement passes — the connections our `PgClient` lends (`makePgClient`) — so the
 * repositories, the migrator, the audit writer and the health probe are all counted without
 * knowing it. Spans for the same statements come from `effect/sql` itself (docs/operations.md#tracing).
 *
 * `@effect/sql-pg` 4 speaks the wire protocol itself (no `pg` pool to patch) and offers no hook
 * around a statement, so `makePgClient` is `PgClient.make` (same pool, compiler, transactions,
 * `json`/`listen`/`notify`) with its connections wrapped to measure, and with the prepare policy
 * below — and with deadlines: waiting for a connection and running a statement
 * are bounded (DATABASE_STATEMENT_TIMEOUT_SECONDS; Db/Deadline.ts), also when the server accepts and
 * never answers. One module on purpose (~310 lines): metrics, prepare policy and deadlines are one
 * wrapper around the driver's connection, which each of them needs whole.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import type * as PgConnection from "@effect/sql-pg/PgConnection"
import * as PgPool from "@effect/sql-pg/PgPool"
import type { NonEmptyReadonlyArray } from "effect/Array"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Reactivity from "effect/reactivity/Reactivity"
import type * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import type * as SqlConnection from "effect/sql/SqlConnection"
import * as SqlError from "effect/sql/SqlError"
import * as Statement from "effect/sql/Statement"
import * as Stream from "effect/Stream"
import { dbConnectionsActive, dbErrorsTotal, dbQueryDuration } from "../Observability/Metrics.ts"
import { databaseTimeout, detached, detachedLease, discarded, isDatabaseTimeout, StatementDeadlineMarginMs, StatementTimeoutMs } from "./Deadline.ts"

/** Bounded label values: the statement's leading keyword, or `other`. */
const OPERATIONS: ReadonlySet<string> = new Set([
  "select", "insert", "update", "delete", "with", "begin", "commit", "rollback", "savepoint", "release",
  "lock", "create", "alter", "drop", "listen", "unlisten", "notify", "set", "show", "copy", "truncate"
])

export const operationOf = (text: string): string => {
  // Skip leading whitespace, `--` line comments and `/* */` block comments.
  const body = text.replace(/^(?:\s+|--[^\n]*\n?|\/\*[\s\S]*?\*\/)*/, "")
  const keyword = /^[A-Za-z]+/.exec(body)?.[0]?.toLowerCase() ?? ""
  return OPERATIONS.has(keyword) ? keyword : "other"
}

/** Readable SQLSTATE names for the errors this service meets; others keep their code. */
const SQLSTATE: Readonly<Record<string, string>> = {
  "23505": "unique_violation",
  "23503": "foreign_key_violation",
  "23502": "not_null_violation",
  "23514": "check_violation",
  "22P02": "invalid_text_representation",
  "40001": "serialization_failure",
  "40P01": "deadlock_detected",
  "42P01": "undefined_table",
  "42601": "syntax_error",
  "55P03": "lock_not_available",
  "57014": "query_canceled",
  "57P01": "admin_shutdown"
}

/**
 * The server's SQLSTATE, or the socket's code (`ECONNREFUSED`), of a failure. A `SqlError`
 * carries it on its reason's cause (an Error with the server's fields), not on itself.
 */
const codeOf = (error: unknown): unknown => {
  if (SqlError.isSqlError(error)) return codeOf(error.reason.cause)
  return typeof error === "object" && error !== null && "code" in error ? error.code : undefined
}

/** The SQLSTATE of a failure the server reported; undefined when it never got that far. */
export const sqlStateOf = (error: unknown): string | undefined => {
  const code = codeOf(error)
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined
}

export const errorTypeOf = (error: unknown): string => {
  if (isDatabaseTimeout(error)) return "timeout"
  const code = sqlStateOf(error)
  return code === undefined ? "connection" : SQLSTATE[code] ?? `sqlstate_${code}`
}

/** Longer statements stay unnamed: the audit writer's multi-row INSERTs, whose row count varies. */
export const PREPARED_TEXT_MAX = 2000
/** Distinct statements each connection keeps prepared; the least recently used is closed beyond. */
export const PREPARED_STATEMENTS_MAX = 200

/**
 * Which statements run as named prepared statements (DATABASE_PREPARED_STATEMENTS): PostgreSQL
 * parses and plans each once per connection instead of once per execution, which saves backend
 * CPU on the hot statements. Only parameterised ones, and not the long ones, so every backend
 * holds a bounded set. A plan a schema change invalidated (a migration by another instance,
 * SQLSTATE 0A000) is parsed again by the driver, unnamed, so the caller never sees the error.
 * Not a pattern match (`ILIKE $n`): after five executions PostgreSQL may keep a generic plan,
 * which cannot see the pattern and so never picks the trigram index — `GET /authors?search=`
 * would scan the table by id order, several times slower than a statement with the pattern
 * planned each time.
 */
export const preparable = (text: string, params: ReadonlyArray<unknown>): boolean =>
  params.length > 0 && text.length <= PREPARED_TEXT_MAX && !text.includes(" ILIKE ")

/** Times a statement and counts its failure (an interruption is not one). */
const measured = <A>(text: string, statement: Effect.Effect<A, SqlError.SqlError>): Effect.Effect<A, SqlError.SqlError> =>
  Effect.suspend(() => {
    const started = performance.now()
    return Effect.onExit(statement, (exit) =>
      Effect.sync(() => {
        const operation = operationOf(text)
        dbQueryDuration.observe({ operation }, (performance.now() - started) / 1000)
        if (Exit.isFailure(exit)) {
          const error = Cause.findErrorOption(exit.cause)
          if (error._tag === "Some") dbErrorsTotal.inc({ operation, error_type: errorTypeOf(error.value) })
        }
      }))
  })

type TransformRows = (<A extends object>(rows: ReadonlyArray<A>) => ReadonlyArray<A>) | undefined

interface Deadline {
  /**
   * The statement's own deadline (a checked-out connection: each statement forks to be given up
   * on); undefined when the borrower's deadline covers it (a connection lent for one statement).
   */
  readonly timeoutMs: number | undefined
  /** Takes the connection out of the pool: it is closed once given back. */
  readonly discard: Effect.Effect<void>
}

/**
 * A pooled session as `effect/sql` uses it (PgClient's own, measured, bounded); streams pass
 * through untimed (the service runs none: `GET /authors` reads keyset batches). A statement given
 * up on (its deadline, or its caller interrupted) leaves the connection in an unknown state: the
 * connection is discarded, and later statements on it (a transaction's ROLLBACK) fail at once.
 */
class MeasuredConnection implements SqlConnection.Connection {
  readonly connection: PgConnection.PgConnection
  readonly prepare: boolean
  readonly deadline: Deadline
  /** The last statement's text, for the `operation` label of a timeout the borrower counts. */
  text = ""
  private dead: SqlError.SqlError | undefined

  constructor(connection: PgConnection.PgConnection, prepare: boolean, deadline: Deadline) {
    this.connection = connection
    this.prepare = prepare
    this.deadline = deadline
  }

  /** Gives the connection up: later statements on it fail at once, and the pool closes it. */
  readonly abandon = Effect.suspend(() => {
    this.dead ??= discarded()
    return this.deadline.discard
  })

  private bounded<A>(text: string, statement: Effect.Effect<A, SqlError.SqlError>): Effect.Effect<A, SqlError.SqlError> {
    if (this.dead !== undefined) return Effect.fail(this.dead)
    this.text = text
    const { timeoutMs } = this.deadline
    // Lent for one statement: it runs on the borrower's fiber, under the borrower's deadline.
    if (timeoutMs === undefined) return measured(text, statement)
    return measured(
      text,
      detached(statement, timeoutMs, this.abandon, () => (this.dead = databaseTimeout("statement", timeoutMs)))
    )
  }

  private rows(text: string, params: ReadonlyArray<unknown>, prepare: boolean, transformRows: TransformRows) {
    const rows = this.bounded(text, Effect.map(this.connection.query(text, params, prepare), (result) => result.rows))
    return transformRows === undefined ? rows : Effect.map(rows, transformRows)
  }

  execute(text: string, params: ReadonlyArray<unknown>, transformRows: TransformRows) {
    return this.rows(text, params, this.prepare && preparable(text, params), transformRows)
  }
  executeUnprepared(text: string, params: ReadonlyArray<unknown>, transformRows: TransformRows) {
    return this.rows(text, params, false, transformRows)
  }
  executeRaw(text: string, params: ReadonlyArray<unknown>) {
    return this.bounded(text, this.connection.query(text, params, this.prepare && preparable(text, params)))
  }
  executeValues(text: string, params: ReadonlyArray<unknown>) {
    return this.bounded(text, this.connection.queryValues(text, params, this.prepare && preparable(text, params)))
  }
  executeValuesUnprepared(text: string, params: ReadonlyArray<unknown>) {
    return this.bounded(text, this.connection.queryValues(text, params, false))
  }
  executeStream(text: string, params: ReadonlyArray<unknown>, transformRows: TransformRows) {
    const stream = this.connection.stream(text, params)
    return transformRows === undefined
      ? stream
      : Stream.mapArray(stream, (rows) => transformRows(rows) as NonEmptyReadonlyArray<PgConnection.Row>)
  }
}

/** A failure to obtain a connection counts as a `connect` error. */
const countConnectError = (error: unknown) =>
  Effect.sync(() => dbErrorsTotal.inc({ operation: "connect", error_type: errorTypeOf(error) }))

/** PostgreSQL answers `ROLLBACK` to a `COMMIT` of an aborted transaction (as PgClient checks). */
const commit = (connection: SqlConnection.Connection): Effect.Effect<void, SqlError.SqlError> =>
  Effect.flatMap(connection.executeRaw("COMMIT", []), (result) =>
    (result as PgConnection.Result).command === "ROLLBACK"
      ? Effect.fail(
        new SqlError.SqlError({
          reason: new SqlError.UnknownError({
            cause: new Error("COMMIT rolled back an aborted transaction"),
            message: "PgClient: COMMIT rolled back an aborted transaction",
            operation: "commit"
          })
        })
      )
      : Effect.void)

/** The kind PgClient's compiler encodes as jsonb. */
const PgJson = Statement.custom<Statement.Custom<"PgJson", unknown>>("PgJson")

interface Deadlines {
  /**
   * DATABASE_STATEMENT_TIMEOUT_SECONDS in ms: how long a statement may wait for a connection and
   * then for its answer (the borrower's one deadline covers both); a transaction's wait for its
   * connection and each of its statements get it as well.
   */
  readonly statementMs: number
}

/**
 * `PgClient.make(config)` with every statement measured, bounded by `deadlines` and prepared by
 * `preparable`; connections checked out are `db_connections_active`. Statement spans keep the
 * name `sql.execute` (only `db.system` is set: `db.namespace` / `server.address` would rename them).
 */
export const makePgClient = (
  config: PgClient.PgPoolConfig,
  deadlines: Deadlines
): Effect.Effect<PgClient.PgClient, SqlError.SqlError, Scope.Scope | Reactivity.Reactivity> =>
  Effect.gen(function*() {
    const pool = yield* PgPool.make(config)
    const prepare = config.prepare ?? true
    const active = Effect.acquireRelease(
      Effect.sync(() => dbConnectionsActive.inc()),
      () => Effect.sync(() => dbConnectionsActive.dec())
    )
    const timeoutOf = (fiber: { readonly getRef: <A>(ref: Context.Reference<A>) => A }) =>
      fiber.getRef(StatementTimeoutMs) ?? deadlines.statementMs + fiber.getRef(StatementDeadlineMarginMs)
    const countTimeout = (operation: string) => Effect.sync(() => dbErrorsTotal.inc({ operation, error_type: "timeout" }))
    /**
     * A checkout held until the scope closes (transactions, `reserve`, streams). Waiting for it is
     * bounded like a statement (interrupting that wait is cheap: `Effect.timeout` does); then each
     * statement on it has its own deadline.
     */
    const checkedOut = (acquire: Effect.Effect<PgConnection.PgConnection, SqlError.SqlError, Scope.Scope>) =>
      Effect.withFiber((fiber) => {
        const ms = timeoutOf(fiber)
        const bounded = Number.isFinite(ms)
          ? Effect.timeoutOrElse(acquire, {
            duration: ms,
            orElse: () => Effect.andThen(countTimeout("connect"), Effect.fail(databaseTimeout("acquire", ms)))
          })
          : acquire
        return bounded.pipe(
          Effect.tapError((error) => (isDatabaseTimeout(error) ? Effect.void : countConnectError(error))),
          Effect.tap(() => active),
          Effect.map((connection): SqlConnection.Connection =>
            new MeasuredConnection(connection, prepare, { timeoutMs: ms, discard: pool.invalidate(connection) })
          )
        )
      })
    /**
     * A connection lent for one statement, with one deadline for the wait and the statement, and
     * one fiber for both (Deadline.ts `detachedLease`). At the deadline the caller gets the
     * database error at once; the lent connection is discarded and its lease given back, so the
     * pool closes it, and the statement's fiber, interrupted in the background, ends with it.
     */
    const borrower: SqlConnection.Borrower = (f) =>
      Effect.withFiber((fiber) => {
        const ms = timeoutOf(fiber)
        let lent: MeasuredConnection | undefined
        const borrow = Effect.flatMap(pool.get, (connection) =>
          Effect.acquireUseRelease(
            Effect.sync(() => {
              lent = new MeasuredConnection(connection, prepare, { timeoutMs: undefined, discard: pool.invalidate(connection) })
              dbConnectionsActive.inc()
              return lent
            }),
            f,
            () => Effect.sync(() => dbConnectionsActive.dec())
          )).pipe(Effect.tapError((error) => (lent === undefined ? countConnectError(error) : Effect.void)))
        const abandon = Effect.suspend(() => (lent === undefined ? Effect.void : lent.abandon))
        return detachedLease(borrow, ms, abandon, () => {
          dbErrorsTotal.inc({ operation: lent === undefined ? "connect" : operationOf(lent.text), error_type: "timeout" })
          return databaseTimeout(lent === undefined ? "acquire" : "statement", ms)
        })
      })

    const client = yield* SqlClient.make({
      acquirer: checkedOut(pool.get),
      borrower,
      transactionAcquirer: checkedOut(pool.reserve),
      compiler: PgClient.makeCompiler(config.transformQueryNames, config.transformJson),
      driver: "pg",
      prepareTransactionControls: true,
      commit,
      releaseSavepoint: (name) => `RELEASE SAVEPOINT ${name}`,
      spanAttributes: [...Object.entries(config.spanAttributes ?? {}), ["db.system", "postgresql"]]
    })

    const pgClient: Omit<PgClient.PgClient, keyof SqlClient.SqlClient> = {
      [PgClient.TypeId]: PgClient.TypeId,
      config,
      json: (value: unknown) => Statement.fragment([PgJson(value)]),
      listen: (channel) => Effect.flatMap(pool.reserve, (connection) => connection.listen(channel)),
      // A statement like any other: measured, and bounded by the borrower's deadline.
      notify: (channel, payload) => Effect.asVoid(client.unsafe("SELECT pg_notify($1, $2)", [channel, payload]))
    }
    return Object.assign(client, pgClient)
  })
