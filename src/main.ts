/** Starts the service with the configuration from the environment (CONTRACT §2). */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Exit, Layer, type Runtime } from "effect"
import { makeServedAppLive } from "./App.ts"
import { AppConfig } from "./Config.ts"
import { drainOnShutdown, nodeServerLayer } from "./Http/NodeServer.ts"
import { LoggerLive } from "./Observability/Logging.ts"

const ServerLive = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  return nodeServerLayer({ port: config.port, host: config.host })
}))

// The port opens last, once the database is migrated and the routes are built (STACK-NOTES
// pitfall 1). drainOnShutdown wraps the app, so on SIGTERM/SIGINT it stops accepting, closes the
// WebSockets and waits up to 5 s for the requests in flight before the app's layers close; the
// audit flush then has 3.5 s (AuditLogs/Writer.ts) — CONTRACT §5/§9: exit within 10 s.
const MainLive = drainOnShutdown(5_000).pipe(
  Layer.provideMerge(makeServedAppLive(ServerLive)),
  Layer.provide(LoggerLive),
  Layer.provide(AppConfig.layer)
)

/**
 * A failure to start (an invalid setting, the built-in provider in production, an unreachable
 * database) goes to stderr, naming its cause, and the exit code is non-zero (CONTRACT §2).
 */
const reportFailure = (cause: Cause.Cause<unknown>) =>
  Cause.hasInterruptsOnly(cause)
    ? Effect.void
    : Effect.sync(() => process.stderr.write(`Service failed: ${Cause.pretty(cause)}\n`))

/**
 * CONTRACT §5: a signal ends the service by interrupting it; once the drain is done that is a
 * clean exit, 0 (runMain's default teardown would exit 130: STACK-NOTES pitfall 3).
 */
const teardown: Runtime.Teardown = (exit, onExit) =>
  onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1)

/**
 * The backstop of CONTRACT §9 "exits within 10 s of SIGTERM in every state" (database or Redis
 * down, records the database refuses, clients that do not read): every step of the shutdown has
 * its own deadline, and should one of them still hang, the process ends here, saying so.
 */
const SHUTDOWN_DEADLINE_MS = 9_000
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    setTimeout(() => {
      process.stderr.write(`Shutdown did not finish within ${SHUTDOWN_DEADLINE_MS} ms of ${signal}; exiting\n`)
      process.exit(1)
    }, SHUTDOWN_DEADLINE_MS).unref()
  })
}

NodeRuntime.runMain(Layer.launch(MainLive).pipe(Effect.tapCause(reportFailure)), { disableErrorReporting: true, teardown })
