/** `/health`, `/livez`, `/readyz` and `/metrics` (no authentication, never rate limited nor audited). */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"

const Status = Schema.Literal("healthy", "unhealthy")

export const HealthReport = Schema.Struct({
  status: Status,
  database: Status,
  redis: Status,
  websocket: Schema.Struct({ status: Status, active_connections: Schema.Int })
}).annotations({ identifier: "HealthReport" })

/** The health report of a service that is still starting (CONTRACT §7: the same shape, never a bare `{detail}`). */
export const STARTING_REPORT = {
  status: "unhealthy",
  database: "unhealthy",
  redis: "unhealthy",
  websocket: { status: "unhealthy", active_connections: 0 }
} as const

export const Liveness = Schema.Struct({ status: Schema.Literal("ok") }).annotations({ identifier: "Liveness" })

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
    HttpApiEndpoint.get("livez", "/livez")
      .addSuccess(Liveness)
      .annotate(OpenApi.Summary, "Liveness: the process answers (no dependency is checked)")
      .annotate(OpenApi.Description, "200 `{\"status\":\"ok\"}` whenever the process can answer at all, also while it starts: an outage of a dependency must not get the instance restarted.")
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz")
      .addSuccess(HealthReport)
      .addError(UnhealthyBody)
      .annotate(OpenApi.Summary, "Readiness: started, migrations applied, database reachable")
      .annotate(OpenApi.Description, "200 when this instance can serve; 503 while it starts or while PostgreSQL is unreachable. The body is the health report either way.")
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics")
      .addSuccess(HttpApiSchema.Text({ contentType: "text/plain; version=0.0.4; charset=utf-8" }))
      .annotate(OpenApi.Summary, "Prometheus metrics")
  )
  .annotate(OpenApi.Title, "Operations")
{}
