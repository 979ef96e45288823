/**
 * The deadlines of every PostgreSQL call (Review F12), used by Db/Instrumentation.ts: what a call
 * that outlived its deadline fails with, a fiber's own deadline (none for the migrations), and how
 * a statement is given up on without waiting for it — which matters when the server accepts and
 * never answers (half-open, blackholed), where no error ever comes.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as SqlError from "effect/sql/SqlError"

/**
 * The cause of a statement that outlived its deadline, or of a connection not lent in time. It is
 * a `SqlError` with a `ConnectionError` reason, so every caller treats it as the outage it is
 * (the audit writer retries; a request gets the database error, CONTRACT §3).
 */
export class DatabaseTimeout extends Error {
  readonly phase: "acquire" | "statement"
  readonly ms: number
  constructor(phase: "acquire" | "statement", ms: number) {
    super(phase === "acquire" ? `No database connection within ${ms} ms` : `The database did not answer within ${ms} ms`)
    this.phase = phase
    this.ms = ms
  }
}

export const databaseTimeout = (phase: "acquire" | "statement", ms: number) =>
  new SqlError.SqlError({
    reason: new SqlError.ConnectionError({
      cause: new DatabaseTimeout(phase, ms),
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
 * still lent. One fork and one timer per call (~1 µs; `Effect.timeout` forks two); a pooled
 * statement passes here twice (the borrow's deadline and the connection's), so it forks twice.
 * Also the /health probes' 1 s bound (Observability/Health.ts).
 */
export const detached = <A, E, R, E2>(
  self: Effect.Effect<A, E, R>,
  timeoutMs: number | undefined,
  abandon: Effect.Effect<void>,
  onExpiry: () => E2
): Effect.Effect<A, E | E2, R> =>
  Effect.withFiber((parent) =>
    Effect.callback<A, E | E2, R>((resume) => {
      // The caller's context is the fiber's: its services (R), span, log annotations.
      const fiber = Effect.runForkWith(parent.context as Context.Context<R>)(self)
      const exit = fiber.pollUnsafe()
      if (exit !== undefined) return resume(exit)
      let timer: ReturnType<typeof setTimeout> | undefined
      const unobserve = fiber.addObserver((exit) => {
        if (timer !== undefined) clearTimeout(timer)
        resume(exit)
      })
      const giveUp = () => {
        if (timer !== undefined) clearTimeout(timer)
        unobserve()
        fiber.interruptUnsafe()
      }
      if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
        timer = setTimeout(() => {
          timer = undefined
          giveUp()
          resume(Effect.andThen(abandon, Effect.fail(onExpiry())))
        }, timeoutMs)
      }
      return Effect.suspend(() => {
        giveUp()
        return abandon
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
