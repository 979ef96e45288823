/** Starts the service with the configuration from the environment (CONTRACT §2). */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Layer } from "effect"
import { AppLive } from "./App.ts"
import { AppConfig } from "./Config.ts"
import { drainOnShutdown, nodeServerLayer } from "./Http/NodeServer.ts"
import { LoggerLive } from "./Observability/Logging.ts"

const ServerLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) => nodeServerLayer({ port: config.port, host: config.host })))

// drainOnShutdown wraps the app, so on SIGTERM/SIGINT it stops accepting, closes the WebSockets
// and waits for the requests in flight before the app's layers close (CONTRACT §5: exit within 10 s).
const MainLive = drainOnShutdown(8_000).pipe(
  Layer.provideMerge(AppLive),
  Layer.provide(ServerLive),
  Layer.provide(LoggerLive),
  Layer.provide(AppConfig.layer)
)

/**
 * A failure to start (an invalid setting, the built-in provider in production, an unreachable
 * database) goes to stderr, naming its cause, and the exit code is non-zero (CONTRACT §2).
 */
const reportFailure = (cause: Cause.Cause<unknown>) =>
  Cause.isInterruptedOnly(cause)
    ? Effect.void
    : Effect.sync(() => process.stderr.write(`Service failed: ${Cause.pretty(cause)}\n`))

NodeRuntime.runMain(Layer.launch(MainLive).pipe(Effect.tapErrorCause(reportFailure)), { disableErrorReporting: true, disablePrettyLogger: true })
