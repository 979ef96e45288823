/** Starts the service with the configuration from the environment (docs/configuration.md#settings). */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Exit, Layer, Option, type Runtime } from "effect"
import * as App from "./App.ts"
import { AppConfig } from "./Config.ts"
import { drainOnShutdown, NodeServer } from "./Http/NodeServer.ts"
import { ShutdownDeadline } from "./Lifecycle.ts"
import { errorText, layerLogger } from "./Observability/Logging.ts"
import { defectStack, type ExitReason, exitReason, failureLine } from "./Startup.ts"

const layerServer = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  return NodeServer.layer({ port: config.port, host: config.host, adminPort: Option.getOrUndefined(config.adminPort) })
}))

/**
 * The shutdown's budget (docs/operations.md#shutdown: exit within 10 s of SIGTERM in every state — database or
 * Redis down or not answering, records the database refuses, clients that do not read), step by
 * step, each with its own deadline:
 * - 0–5 s: stop accepting, close the WebSockets (one that does not answer its close is cut), let
 *   the requests in flight finish (a statement waits at most DATABASE_STATEMENT_TIMEOUT_SECONDS,
 *   a Redis command 1–2 s); a response its client does not read ends with the drain;
 * - the audit flush: at most 3.5 s (AuditLogs/WriterOptions.ts) and done by 7.5 s after the signal;
 * - then Redis (QUIT, 300 ms per connection, else dropped) and the pool (statements are never
 *   waited for: Db/Instrumentation.ts `detached`) close at once;
 * - at 9 s the watchdog below ends the process should a step still hang.
 */
const DRAIN_MS = 5_000
const FLUSH_DONE_BY_MS = 7_500
const SHUTDOWN_DEADLINE_MS = 9_000

/** When the first SIGTERM/SIGINT came (epoch ms). */
let signalledAt: number | undefined

const layerShutdownDeadline = Layer.succeed(ShutdownDeadline, {
  at: () => (signalledAt === undefined ? undefined : signalledAt + FLUSH_DONE_BY_MS)
})

/** Set once the service is ready (its handler attached): a failure after that is not a failed start. */
let ready = false
const layerReadyMark = Layer.effectDiscard(Effect.sync(() => {
  ready = true
}))

// The port opens first and answers the probes while the rest starts (App.ts); the handler is
// attached once the database is migrated and the routes are built. drainOnShutdown wraps the
// app, so its finalizer runs first: the app's handler and services are still in place while the
// requests in flight finish.
const layerMain = Layer.mergeAll(drainOnShutdown(DRAIN_MS), layerReadyMark).pipe(
  Layer.provideMerge(App.layer(layerServer)),
  Layer.provide(layerShutdownDeadline),
  Layer.provide(layerLogger),
  Layer.provide(AppConfig.layer)
)

/**
 * Every exit but a clean one says why in one FATAL line on stderr — JSON in production — and the
 * exit code is 1 (docs/operations.md#exits; Startup.ts `failureLine`).
 */
const fatal = (reason: ExitReason) => {
  process.stderr.write(`${failureLine(process.env, reason)}\n`)
}

/**
 * A failure to start (an invalid setting, the built-in provider in production, a database that
 * stayed unreachable for STARTUP_TIMEOUT_SECONDS, a port in use) or a failure that stops the
 * running service.
 */
const reportFailure = (cause: Cause.Cause<unknown>) =>
  Cause.hasInterruptsOnly(cause)
    ? Effect.void
    : Effect.sync(() => {
      const reason = exitReason(cause)
      fatal({ ...reason, message: `${ready ? "Service failed" : "Service failed to start"}: ${reason.message}` })
    })

/**
 * A throw no fiber caught, or a promise rejected with nobody waiting for it (a library's own
 * promise): Node would print a stack and exit 1; the process still ends — its state is not
 * known — but with the FATAL line saying what, and the stack in `cause`.
 */
for (const event of ["uncaughtException", "unhandledRejection"] as const) {
  process.on(event, (error: unknown) => {
    const what = event === "uncaughtException" ? "an uncaught exception" : "an unhandled promise rejection"
    fatal({ message: `${ready ? "Service failed" : "Service failed to start"}: ${what}: ${errorText(error)}`, cause: defectStack(error) })
    process.exit(1)
  })
}

/**
 * A signal ends the service by interrupting it (docs/operations.md#shutdown); once the drain is done that is
 * a clean exit, 0 (runMain's default teardown would exit 130).
 */
const teardown: Runtime.Teardown = (exit, onExit) =>
  onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1)

/**
 * The backstop of the 10 s exit (docs/operations.md#shutdown): every step of the shutdown has its own deadline (above), and
 * should one of them still hang, the process ends here, saying so.
 */
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    signalledAt ??= Date.now()
    setTimeout(() => {
      fatal({ message: `Shutdown did not finish within ${SHUTDOWN_DEADLINE_MS} ms of ${signal}; exiting` })
      process.exit(1)
    }, SHUTDOWN_DEADLINE_MS).unref()
  })
}

NodeRuntime.runMain(Layer.launch(layerMain).pipe(Effect.tapCause(reportFailure)), { disableErrorReporting: true, teardown })
