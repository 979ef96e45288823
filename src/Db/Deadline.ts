/**
 * The deadlines of every PostgreSQL call, used by Db/Instrumentation.ts: what a call
 * that outlived its deadline fails with, a fiber's own deadline (none for the migrations), and how
 * a statement is given up on without waiting for it — which matters when the server accepts and
 * never answers (half-open, blackholed), where no error ever comes.
 */
import { Data } from "effect"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as SqlError from "effect/sql/SqlError"

/**
 * The cause of a statement that outlived its deadline, or of a connection not lent in time. It is
 * a `SqlError` with a `ConnectionError` reason, so every caller treats it as the outage it is
 * (the audit writer retries; a request gets the database error, docs/errors-and-limits.md#http-errors).
 */
export class DatabaseTimeout extends Data.TaggedError("DatabaseTimeout")<{
  readonly phase: "acquire" | "statement"
  readonly ms: number
  readonly message: string
}> {
  static readonly of = (phase: "acquire" | "statement", ms: number) =>
    new DatabaseTimeout({
      phase,
      ms,
      message: phase === "acquire" ? `No database connection within ${ms} ms` : `The database did not answer within ${ms} ms`
    })
}

export const databaseTimeout = (phase: "acquire" | "statement", ms: number) =>
  new SqlError.SqlError({
    reason: new SqlError.ConnectionError({
      cause: DatabaseTimeout.of(phase, ms),
      message: `PgClient: ${phase === "acquire" ? "Connection" : "Statement"} timed out`,
      operation: phase === "acquire" ? "connect" : "query"
    })
  })

export const isDatabaseTimeout = (error: unknown): boolean =>
  SqlError.isSqlError(error) && error.reason.cause instanceof DatabaseTimeout

/**
 * A fiber's own statement deadline in ms, overriding the pool's: `Infinity` for none (the
 * migrations, which wait for each other's lock and may build indexes for minutes).
 */
export const StatementTimeoutMs = Context.Reference<number | undefined>("Db/StatementTimeoutMs", {
  defaultValue: () => undefined
})

/**
 * Runs `self` on a fiber of its own and waits for it until `timeoutMs` (when given). At the
 * deadline, or when the caller is interrupted, the caller goes on at once: `abandon` runs (it
 * discards the connection, so the pool closes it and the statement ends with it) and the fiber is
 * interrupted without being waited for. `Effect.timeout` would wait: an interrupted statement
 * drains its connection up to ReadyForQuery, which a server that accepts and never answers
 * (half-open, blackholed) holds for 5 s (PgConnection's cancel deadline) — with the connection
 * still lent. One fork and one timer per call (~1 µs; `Effect.timeout` forks two). Used for the
 * statements of a checked-out connection (transactions) and the /health probes' 1 s bound
 * (Observability/Health.ts); a pooled statement takes `detachedLease`.
 */
export const detached = <A, E, R, E2>(
  self: Effect.Effect<A, E, R>,
  timeoutMs: number | undefined,
  abandon: Effect.Effect<void>,
  onExpiry: () => E2
): Effect.Effect<A, E | E2, R> => run(self, false, timeoutMs, abandon, onExpiry)

/**
 * `detached` for work that borrows from a pool (a connection lent for one statement): the fiber
 * runs with a `Scope` the caller owns, which the lease's release goes into. The caller closes it
 * once the work is over, and at once when it gives up, after `abandon` (which invalidates what was
 * lent): the lease goes back and the pool closes the connection there and then, which ends the
 * interrupted statement's drain with it. So the deadline of the borrow covers the wait for a
 * connection and the statement with one fork: the statement needs no fiber of its own to be given
 * up on (two forks per statement before).
 */
export const detachedLease = <A, E, R, E2>(
  self: Effect.Effect<A, E, R | Scope.Scope>,
  timeoutMs: number | undefined,
  abandon: Effect.Effect<void>,
  onExpiry: () => E2
): Effect.Effect<A, E | E2, Exclude<R, Scope.Scope>> =>
  // The fiber's Scope is provided by `run`.
  run(self, true, timeoutMs, abandon, onExpiry) as Effect.Effect<A, E | E2, Exclude<R, Scope.Scope>>

const run = <A, E, R, E2>(
  self: Effect.Effect<A, E, R>,
  leased: boolean,
  timeoutMs: number | undefined,
  abandon: Effect.Effect<void>,
  onExpiry: () => E2
): Effect.Effect<A, E | E2, R> =>
  Effect.withFiber((parent) =>
    Effect.callback<A, E | E2, R>((resume) => {
      // The caller's context is the fiber's: its services (R), span, log annotations.
      const context = parent.context as Context.Context<R>
      const scope = leased ? Scope.makeUnsafe() : undefined
      const fiber = Effect.runForkWith(scope === undefined ? context : Context.add(context, Scope.Scope, scope))(self)
      /** The exit, once what the fiber borrowed is given back. */
      const ended = (exit: Exit.Exit<A, E>) => scope === undefined ? exit : Effect.andThen(Scope.close(scope, exit), exit)
      const exit = fiber.pollUnsafe()
      if (exit !== undefined) return resume(ended(exit))
      let timer: ReturnType<typeof setTimeout> | undefined
      const unobserve = fiber.addObserver((exit) => {
        if (timer !== undefined) clearTimeout(timer)
        resume(ended(exit))
      })
      const giveUp = () => {
        if (timer !== undefined) clearTimeout(timer)
        unobserve()
        fiber.interruptUnsafe()
      }
      const abandoned = scope === undefined ? abandon : Effect.andThen(abandon, Scope.close(scope, Exit.interrupt()))
      if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
        timer = setTimeout(() => {
          timer = undefined
          giveUp()
          resume(Effect.andThen(abandoned, Effect.fail(onExpiry())))
        }, timeoutMs)
      }
      return Effect.suspend(() => {
        giveUp()
        return abandoned
      })
    })
  )

/** What a statement fails with on a connection discarded after an earlier statement was given up on. */
export const discarded = () =>
  new SqlError.SqlError({
    reason: new SqlError.ConnectionError({
      cause: new Error("An earlier statement on this connection was given up on"),
      message: "PgClient: Connection discarded",
      operation: "query"
    })
  })

/**
 * Added, for a fiber's statements, to the pool's deadline (not to `StatementTimeoutMs`): a
 * statement waited for a little longer than PostgreSQL's own `statement_timeout`, so that when it
 * is too slow the server cancels it (a refusal: certainly not committed) before the service gives
 * up on it (an unknown outcome). Used by the statements of a batch of writes (Authors/Writes.ts).
 */
export const StatementDeadlineMarginMs = Context.Reference<number>("Db/StatementDeadlineMarginMs", {
  defaultValue: () => 0
})
