/** `npm run migrate`: applies pending migrations to the configured database and exits. */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import { AppConfig } from "./Config.ts"
import * as App from "./App.ts"

NodeRuntime.runMain(
  Effect.logInfo("Migrations are up to date").pipe(
    Effect.provide(App.layerDatabase.pipe(Layer.provide(AppConfig.layer)))
  )
)
