/**
 * What start-up does besides wiring the Layers (App.ts): it waits for a database it cannot reach
 * yet, and when it gives up — or anything else stops it — it says why in one log line.
 *
 * The port is already open while this runs (App.ts), answering the probes (Http/NodeServer.ts), so
 * a database that comes up a little after the service (a restarted cluster, a pod scheduled first)
 * costs a few seconds of "starting" instead of a crash loop. What is waited for is only what a
 * later attempt can fix — the server refusing or not answering, a name not resolving yet, the
 * server starting up or shutting down, too many connections; a wrong password, a missing database
 * or a bad URL stop start-up at once.
 */
import { Cause, Data, Effect, Exit, Layer, Scope } from "effect"
import { AppConfig, appEnvOf } from "./Config.ts"
import { isUnreachable } from "./Db/Failures.ts"
import { errorText, errorWords, scrubText } from "./Observability/Logging.ts"

/** Start-up gave up on the database after STARTUP_TIMEOUT_SECONDS. */
export class DatabaseUnreachable extends Data.TaggedError("DatabaseUnreachable")<{ readonly message: string; readonly cause: unknown }> {}

/** A JavaScript error that only a bug throws: its stack says where. */
const isProgrammingError = (defect: unknown) =>
  defect instanceof TypeError || defect instanceof RangeError || defect instanceof ReferenceError || defect instanceof SyntaxError

export interface ExitReason {
  /** What stopped the service. */
  readonly message: string
  /** What was behind it, secrets removed: a dependency's own reply, or a bug's stack. */
  readonly cause?: string
}

/**
 * What stopped the service (interruptions left out): each failure's own message, and in `cause`
 * the words of what caused it — the database's refusal, the socket's error — or, for a bug, its
 * stack.
 */
export const exitReason = (cause: Cause.Cause<unknown>): ExitReason => {
  const words = cause.reasons.flatMap((reason) => {
    if (Cause.isFailReason(reason)) return [errorWords(reason.error)]
    if (!Cause.isDieReason(reason)) return []
    const own = errorWords(reason.defect)
    return [isProgrammingError(reason.defect) ? { ...own, causes: defectStack(reason.defect) } : own]
  })
  const message = [...new Set(words.map((w) => w.own))].join("; ") || "interrupted"
  const causes = [...new Set(words.flatMap((w) => (w.causes === undefined ? [] : [w.causes])))]
  return causes.length === 0 ? { message } : { message, cause: causes.join("; ") }
}

/**
 * The FATAL line's `message` for each way the process ends badly (docs/operations.md#exits), one
 * builder per kind, so that main.ts and docs/troubleshooting.md#fatal-lines (checked against these)
 * say the same words: until the service is ready a failure is a failed start.
 */
export const failedMessage = (ready: boolean, what: string): string => `${ready ? "Service failed" : "Service failed to start"}: ${what}`

/** `npm run migrate` (migrate.ts) stopped by `what`. */
export const migrationsFailedMessage = (what: string): string => `Migrations not applied: ${what}`

/** A throw no fiber caught, or a promise rejected with nobody waiting for it: a bug. */
export const crashMessage = (ready: boolean, event: "uncaughtException" | "unhandledRejection", error: unknown): string =>
  failedMessage(ready, `${event === "uncaughtException" ? "an uncaught exception" : "an unhandled promise rejection"}: ${errorText(error)}`)

/** The shutdown's backstop: a step still hangs `deadlineMs` after the signal. */
export const overdueMessage = (signal: string, deadlineMs: number): string => `Shutdown did not finish within ${deadlineMs} ms of ${signal}; exiting`

/** A thrown value's stack (secrets removed), else its words. */
export const defectStack = (defect: unknown): string =>
  defect instanceof Error && defect.stack !== undefined ? scrubText(defect.stack) : errorText(defect)

/**
 * Builds `database` (connect, migrate) and, while the database cannot be reached, builds it again
 * with a growing pause (0.25 s doubling to 5 s) until STARTUP_TIMEOUT_SECONDS have passed since the
 * first attempt; then fails with `DatabaseUnreachable`, naming the last cause. An attempt under way
 * at the deadline is not cut short (it may be migrating): the connect timeout bounds it. Each
 * attempt gets a fresh scope, so a failed attempt's connections are closed before the next one.
 */
export const untilDatabaseReachable = <A, E, R>(
  database: Layer.Layer<A, E, R>
): Layer.Layer<A, E | DatabaseUnreachable, R | AppConfig> =>
  Layer.effectContext(Effect.gen(function*() {
    const config = yield* AppConfig
    const scope = yield* Effect.scope
    const timeoutMs = config.startupTimeoutSeconds * 1000
    const started = Date.now()
    let pauseMs = 250
    for (let attempt = 1; ; attempt++) {
      const attemptScope = yield* Scope.fork(scope, "sequential")
      const exit = yield* Effect.exit(Layer.buildWithScope(database, attemptScope))
      if (Exit.isSuccess(exit)) {
        if (attempt > 1) yield* Effect.logInfo(`Database reached after ${attempt} attempts (${((Date.now() - started) / 1000).toFixed(1)} s)`)
        return exit.value
      }
      yield* Scope.close(attemptScope, exit)
      const failure = Cause.findErrorOption(exit.cause)
      if (failure._tag === "None" || !isUnreachable(failure.value)) return yield* Effect.failCause(exit.cause)
      const reason = errorText(failure.value)
      const leftMs = started + timeoutMs - Date.now()
      if (leftMs <= 0) {
        return yield* Effect.fail(new DatabaseUnreachable({
          message: `The database could not be reached within STARTUP_TIMEOUT_SECONDS=${config.startupTimeoutSeconds} (${attempt} attempts)`,
          cause: failure.value
        }))
      }
      const waitMs = Math.min(pauseMs, leftMs)
      yield* Effect.logWarning(
        `Database not reachable yet (attempt ${attempt}): ${reason}; next attempt in ${(waitMs / 1000).toFixed(2)} s, ` +
          `giving up ${Math.ceil(leftMs / 1000)} s from now (STARTUP_TIMEOUT_SECONDS)`
      )
      yield* Effect.sleep(waitMs)
      pauseMs = Math.min(pauseMs * 2, 5_000)
    }
  }))

/**
 * The line every exit but a clean one leaves behind (docs/operations.md#exits): JSON with
 * LOG_FORMAT=json (the default in production) — `message` what stopped the service, `cause` what
 * was behind it — else a pretty line; one line either way, written whatever LOG_LEVEL says (it is
 * the reason for the exit code). The format comes from the raw environment: the configuration
 * itself may be what failed.
 */
export const failureLine = (env: Readonly<Record<string, string | undefined>>, reason: ExitReason, now = new Date()): string => {
  const format = env["LOG_FORMAT"]?.trim()
  const json = format === "json" || (format !== "pretty" && appEnvOf(env["APP_ENV"]?.trim(), env["NODE_ENV"]).appEnv === "production")
  return json
    ? JSON.stringify({ timestamp: now.toISOString(), level: "FATAL", message: reason.message, ...(reason.cause !== undefined ? { cause: reason.cause } : {}) })
    : `[${now.toISOString()}] FATAL ${reason.message}${reason.cause === undefined ? "" : ` (${reason.cause.replace(/\s*\n\s*/g, " ")})`}`
}
