/** `/health` and `/metrics` (no authentication, never rate limited). */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"

const Status = Schema.Literal("healthy", "unhealthy")

export const HealthReport = Schema.Struct({
  status: Status,
  database: Status,
  redis: Status,
  websocket: Schema.Struct({ status: Status, active_connections: Schema.Int })
}).annotations({ identifier: "HealthReport" })

export class Unhealthy extends Schema.TaggedError<Unhealthy>()("Unhealthy", { report: HealthReport }) {}

export const UnhealthyBody = Schema.transform(HealthReport, Schema.typeSchema(Unhealthy), {
  strict: true,
  decode: (report) => new Unhealthy({ report }),
  encode: (error) => error.report
}).annotations(HttpApiSchema.annotations({ status: 503, identifier: "UnhealthyReport" }))

export class SystemApi extends HttpApiGroup.make("system")
  .add(
    HttpApiEndpoint.get("health", "/health")
      .addSuccess(HealthReport)
      .addError(UnhealthyBody)
      .annotate(OpenApi.Summary, "Health of the service and its dependencies")
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics")
      .addSuccess(HttpApiSchema.Text({ contentType: "text/plain; version=0.0.4; charset=utf-8" }))
      .annotate(OpenApi.Summary, "Prometheus metrics")
  )
  .annotate(OpenApi.Title, "Operations")
{}
