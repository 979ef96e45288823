import { Effect } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { METRICS_CONTENT_TYPE, Unhealthy } from "./Api.ts"
import { Health } from "./Health.ts"
import { registry } from "./Metrics.ts"

export const layer = HttpApiBuilder.group(
  Api,
  "system",
  Effect.fn(function*(handlers) {
    const health = yield* Health
    return handlers
      .handle("health", () =>
        Effect.flatMap(health.check, (report) =>
          report.status === "healthy" ? Effect.succeed(report) : Effect.fail(new Unhealthy({ report }))))
      .handle("livez", () => Effect.succeed({ status: "ok" as const }))
      // Ready = serving (migrations ran before the app was built), the database answers and an OIDC
      // provider's keys were fetched once (without them no token verifies); a Redis outage leaves the
      // instance serving per RATE_LIMIT_FAIL_MODE, so it does not make it unready.
      .handle("readyz", () =>
        Effect.flatMap(health.check, (report) =>
          report.database === "healthy" && report.identity !== "unhealthy" ? Effect.succeed(report) : Effect.fail(new Unhealthy({ report }))))
      // Raw response: prom-client's text exactly as it renders it, with the exposition content type.
      .handle("metrics", () =>
        Effect.promise(() => registry.metrics()).pipe(
          Effect.map((text) => HttpServerResponse.text(text, { contentType: METRICS_CONTENT_TYPE }))
        ))
  })
)
