import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { Health } from "./Health.js"
import { registry } from "./Metrics.js"
import { Unhealthy } from "./Api.js"

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
