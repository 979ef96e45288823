/**
 * OpenTelemetry tracing (docs/operations.md#tracing). Effect creates the spans — the HTTP server (one per request,
 * continuing an incoming W3C `traceparent`), the SQL client (one per statement), `redisCommand` (one
 * per Redis command) and the WebSocket route (`ws.message`) — and this layer decides where they go:
 * over OTLP/HTTP when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set
 * (`tracesUrl`, as the OpenTelemetry specification reads them). Without either the tracer is
 * disabled: no spans are made (Effect hands out no-op spans), no OpenTelemetry module is even loaded
 * (they are imported on demand), and log lines carry the request's trace id (Domain/RequestContext.ts
 * `traceId`: the caller's `traceparent`, else the request id). Provide it *under* the server and SQL
 * layers, so the tracer is installed before they start.
 *
 * What an exported server span may say about a request is an allow-list (`layerSafeSpanAttributes`):
 * no request header but the body's type and length — never `Authorization`, `Cookie` or an API
 * key — and query values only of the API's own parameters; any other (`access_token=…` on a URL,
 * the `/web` query's token) is exported as `REDACTED`.
 */
import type { SpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer, Option, References } from "effect"
import { HttpMiddleware, UrlParams } from "effect/http"
import { AppConfig, type AppConfigShape } from "../Config.ts"
import { appVersion } from "./Metrics.ts"

/** Headers a server span may carry, per phase; every other header is left out. */
export const SPAN_HEADERS = {
  request: new Set(["content-type", "content-length"]),
  response: new Set(["content-type", "content-length", "x-request-id", "x-correlation-id"])
} as const

/**
 * The query parameters of the API (authors, pagination, audit filters, the WS
 * `format`): only their values reach `url.full` / `url.query`. A parameter added to the API
 * later is redacted until it is listed here — the safe way to be out of date.
 */
export const SPAN_QUERY_PARAMETERS: ReadonlyArray<string> = [
  "id", "name", "search", "page", "per_page", "cursor",
  "user_id", "username", "action_type", "resource", "outcome", "start_date", "end_date",
  "format"
]

/** Matches every name but the listed ones (the platform redacts a query value whose name matches). */
const unlistedQueryName = new RegExp(`^(?!(?:${SPAN_QUERY_PARAMETERS.join("|")})$)`)

/** The allow-lists above, as the platform's server-span settings. */
const layerSafeSpanAttributes: Layer.Layer<never> = Layer.mergeAll(
  Layer.succeed(HttpMiddleware.TracerHeaderFilter, (name: string, phase: "request" | "response") => SPAN_HEADERS[phase].has(name)),
  Layer.succeed(UrlParams.CurrentRedactedNames, [unlistedQueryName])
)

/** An OTel SDK tracer sending spans to `processor` (tests pass an in-memory exporter's). */
export const layerTracingTo = (processor: SpanProcessor): Layer.Layer<never, never, AppConfig> =>
  Layer.unwrap(Effect.gen(function*() {
    const config = yield* AppConfig
    const NodeSdk = yield* Effect.promise(() => import("@effect/opentelemetry/NodeSdk"))
    return Layer.merge(
      NodeSdk.layer(() => ({
        resource: { serviceName: config.otelServiceName, serviceVersion: appVersion, attributes: { "deployment.environment": config.appEnv } },
        spanProcessor: processor
      })),
      layerSafeSpanAttributes
    )
  }))

/**
 * Where spans are posted, as the OpenTelemetry specification reads its variables:
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is the full URL, used as is; else `OTEL_EXPORTER_OTLP_ENDPOINT`
 * is the base URL of an OTLP/HTTP receiver (the collector's :4318) and spans go to
 * `<endpoint>/v1/traces`. Neither set: no tracing.
 */
export const tracesUrl = (
  config: Pick<AppConfigShape, "otelExporterOtlpEndpoint" | "otelExporterOtlpTracesEndpoint">
): Option.Option<string> =>
  Option.orElse(
    config.otelExporterOtlpTracesEndpoint,
    () => Option.map(config.otelExporterOtlpEndpoint, (endpoint) => `${endpoint.replace(/\/+$/, "")}/v1/traces`)
  )

/** Spans posted to `url` in batches, flushed at shutdown. */
export const layerTracingOtlp = (url: string): Layer.Layer<never, never, AppConfig> =>
  Layer.unwrap(Effect.gen(function*() {
    const [{ OTLPTraceExporter }, { BatchSpanProcessor }] = yield* Effect.promise(() =>
      Promise.all([import("@opentelemetry/exporter-trace-otlp-http"), import("@opentelemetry/sdk-trace-base")])
    )
    return layerTracingTo(new BatchSpanProcessor(new OTLPTraceExporter({ url })))
  }))

export const layerTracing: Layer.Layer<never, never, AppConfig> = Layer.unwrap(AppConfig.useSync((config) =>
  Option.match(tracesUrl(config), {
    // No exporter, no tracing work at all: every span (server, SQL, Redis, WS) is a no-op and the
    // server opens none (log lines take their trace id from the request instead, Logging.ts). The
    // allow-lists still keep secrets out of any URL the platform renders (an HttpServerError in a log line).
    onNone: () => Layer.merge(layerSafeSpanAttributes, Layer.succeed(References.TracerEnabled, false)),
    onSome: layerTracingOtlp
  })
))
