/** Starts the service with the configuration from the environment (CONTRACT §2). */
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { AppLive } from "./App.js"
import { AppConfig } from "./Config.js"
import { LoggerLive } from "./Observability/Logging.js"

const ServerLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
  NodeHttpServer.layer(() => createServer({ keepAliveTimeout: 65_000 }), { port: config.port, host: config.host })
))

const MainLive = AppLive.pipe(
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

NodeRuntime.runMain(Layer.launch(MainLive).pipe(Effect.tapErrorCause(reportFailure)), { disableErrorReporting: true })
