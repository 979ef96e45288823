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
      .handle("metrics", () =>
        Effect.promise(() => registry.metrics()).pipe(
          Effect.map((text) =>
            HttpServerResponse.text(text, { contentType: "text/plain; version=0.0.4; charset=utf-8" })
          )
        ))
  }))
