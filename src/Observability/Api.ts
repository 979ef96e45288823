/** `/health`, `/livez`, `/readyz` and `/metrics` (no authentication, never rate limited nor audited). */
import { Schema, SchemaTransformation } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"

const Status = Schema.Literals(["healthy", "unhealthy"])

export const HealthReport = Schema.Struct({
  status: Status.annotate({ description: "`unhealthy` when any check is" }),
  database: Status.annotate({ description: "PostgreSQL answers `SELECT 1`" }),
  redis: Status.annotate({ description: "Redis takes a write under `REDIS_KEY_PREFIX` (the in-process store: always `healthy`)" }),
  websocket: Schema.Struct({ status: Status, active_connections: Schema.Int }).annotate({
    description: "the connection registry's store answers; this instance's open connections"
  }),
  identity: Schema.optional(Status).annotate({
    description: "With an OIDC provider only: its signing keys are held from an earlier fetch or can be fetched now"
  })
}).annotate({ identifier: "HealthReport" })

export class Unhealthy extends Schema.TaggedError<Unhealthy>()("Unhealthy", { report: HealthReport }) {}

/** The 503 body is the report itself (no `_tag` on the wire). */
export const UnhealthyBody = HealthReport.pipe(
  Schema.decodeTo(
    Schema.instanceOf(Unhealthy),
    SchemaTransformation.transform<Unhealthy, typeof HealthReport.Type>({
      decode: (report) => new Unhealthy({ report }),
      encode: (error) => error.report
    })
  )
).annotate({ httpApiStatus: 503, identifier: "UnhealthyReport" })

/** The health report of a service that is still starting (the same shape, never a bare `{detail}`: docs/operations.md#starting). */
export const STARTING_REPORT = {
  status: "unhealthy",
  database: "unhealthy",
  redis: "unhealthy",
  websocket: { status: "unhealthy", active_connections: 0 }
} as const

export const Liveness = Schema.Struct({ status: Schema.Literal("ok") }).annotate({ identifier: "Liveness" })

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

export class SystemApi extends HttpApiGroup.make("system")
  .add(
    HttpApiEndpoint.get("health", "/health", { success: HealthReport, error: UnhealthyBody })
      .annotate(OpenApi.Summary, "Health of the service and its dependencies")
  )
  .add(
    HttpApiEndpoint.get("livez", "/livez", { success: Liveness })
      .annotate(OpenApi.Summary, "Liveness: the process answers (no dependency is checked)")
      .annotate(OpenApi.Description, "200 `{\"status\":\"ok\"}` whenever the process can answer at all: an outage of a dependency must not get the instance restarted.")
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz", { success: HealthReport, error: UnhealthyBody })
      .annotate(OpenApi.Summary, "Readiness: started, migrations applied, database reachable, identity provider's keys fetched")
      .annotate(OpenApi.Description, "200 when this instance can serve; 503 while it starts, while PostgreSQL is unreachable, and until an OIDC provider's signing keys have been fetched once. The body is the health report either way.")
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics", {
      success: Schema.String.pipe(HttpApiSchema.asText({ contentType: METRICS_CONTENT_TYPE }))
    })
      .annotate(OpenApi.Summary, "Prometheus metrics")
  )
  .annotate(OpenApi.Title, "Operations")
{}
