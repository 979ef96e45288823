import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { Api } from "../Api.ts"
import { Health } from "./Health.ts"
import { registry } from "./Metrics.ts"
import { Unhealthy } from "./Api.ts"

export const SystemHttpLive = HttpApiBuilder.group(Api, "system", (handlers) =>
  Effect.gen(function*() {
    const health = yield* Health
    return handlers
      .handle("health", () =>
        Effect.flatMap(health.check, (report) =>
          report.status === "healthy" ? Effect.succeed(report) : Effect.fail(new Unhealthy({ report }))))
      .handle("livez", () => Effect.succeed({ status: "ok" as const }))
      // Ready = serving (migrations ran before the app was built) and the database answers; a Redis
      // outage leaves the instance serving per RATE_LIMIT_FAIL_MODE, so it does not make it unready.
      .handle("readyz", () =>
        Effect.flatMap(health.check, (report) =>
          report.database === "healthy" ? Effect.succeed(report) : Effect.fail(new Unhealthy({ report }))))
      .handle("metrics", () =>
        Effect.promise(() => registry.metrics()).pipe(
          Effect.map((text) =>
            HttpServerResponse.text(text, { contentType: "text/plain; version=0.0.4; charset=utf-8" })
          )
        ))
  }))
