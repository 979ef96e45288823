/** Starts the service with the configuration from the environment (CONTRACT §2). */
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
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

NodeRuntime.runMain(Layer.launch(MainLive))
