/**
 * `npm run migrate`: applies pending migrations to the configured database and exits. A failure
 * is one line on stderr naming its cause, exit code 1 — also when the embedded database is open in
 * a running service (Db/DataDirLock.ts: `the embedded database in <dir> is in use by process <pid>`).
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Layer } from "effect"
import { AppConfig } from "./Config.ts"
import * as App from "./App.ts"
import { exitReason, failureLine, migrationsFailedMessage } from "./Startup.ts"

NodeRuntime.runMain(
  Effect.logInfo("Migrations are up to date").pipe(
    Effect.provide(App.layerDatabase.pipe(Layer.provide(AppConfig.layer))),
    Effect.tapCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.void
        : Effect.sync(() => {
          const reason = exitReason(cause)
          process.stderr.write(`${failureLine(process.env, { ...reason, message: migrationsFailedMessage(reason.message) })}\n`)
        })
    )
  ),
  { disableErrorReporting: true }
)
