/**
 * OpenTelemetry tracing (CONTRACT §8). Effect creates the spans — the HTTP server (one per request,
 * continuing an incoming W3C `traceparent`), the SQL client (one per statement), `redisCommand` (one
 * per Redis command) and the WebSocket route (`ws.message`) — and this layer decides where they go:
 * over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, nowhere otherwise (Effect's own tracer
 * still links them, so log lines keep their trace ids). Without an endpoint no OpenTelemetry module
 * is even loaded (they are imported on demand). Provide it *under* the server and SQL layers, so
 * the tracer is installed before they start.
 */
import type { SpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer, Option } from "effect"
import { AppConfig } from "../Config.ts"
import { appVersion } from "./Metrics.ts"

/** An OTel SDK tracer sending spans to `processor` (tests pass an in-memory exporter's). */
export const tracingWith = (processor: SpanProcessor): Layer.Layer<never, never, AppConfig> =>
  Layer.unwrap(Effect.gen(function*() {
    const config = yield* AppConfig
    const NodeSdk = yield* Effect.promise(() => import("@effect/opentelemetry/NodeSdk"))
    return NodeSdk.layer(() => ({
      resource: { serviceName: config.otelServiceName, serviceVersion: appVersion, attributes: { "deployment.environment": config.appEnv } },
      spanProcessor: processor
    }))
  }))

/**
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is the base URL of an OTLP/HTTP receiver (the collector's :4318);
 * spans are posted to `<endpoint>/v1/traces` in batches, flushed at shutdown.
 */
export const otlpTracing = (endpoint: string): Layer.Layer<never, never, AppConfig> =>
  Layer.unwrap(Effect.gen(function*() {
    const [{ OTLPTraceExporter }, { BatchSpanProcessor }] = yield* Effect.promise(() =>
      Promise.all([import("@opentelemetry/exporter-trace-otlp-http"), import("@opentelemetry/sdk-trace-base")])
    )
    return tracingWith(new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint.replace(/\/+$/, "")}/v1/traces` })))
  }))

export const TracingLive: Layer.Layer<never, never, AppConfig> = Layer.unwrap(AppConfig.useSync((config) =>
  Option.match(config.otelExporterOtlpEndpoint, {
    onNone: () => Layer.empty,
    onSome: otlpTracing
  })
))
