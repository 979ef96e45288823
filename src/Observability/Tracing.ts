/**
 * OpenTelemetry tracing (CONTRACT §8). Effect creates the spans — the HTTP server (one per request,
 * continuing an incoming W3C `traceparent`), @effect/sql (one per statement), `redisCommand` (one per
 * Redis command) and the WebSocket route (`ws.message`) — and this layer decides where they go:
 * over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, nowhere otherwise (Effect's own tracer
 * still links them, so log lines keep their trace ids). Provide it *under* the server and SQL
 * layers, so the tracer is installed before they start (STACK-NOTES §e).
 */
import { NodeSdk } from "@effect/opentelemetry"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import { BatchSpanProcessor, type SpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer, Option } from "effect"
import { AppConfig } from "../Config.ts"
import { appVersion } from "./Metrics.ts"

/** An OTel SDK tracer sending spans to `processor` (tests pass an in-memory exporter's). */
export const tracingWith = (processor: SpanProcessor) =>
  Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
    NodeSdk.layer(() => ({
      resource: { serviceName: config.otelServiceName, serviceVersion: appVersion, attributes: { "deployment.environment": config.appEnv } },
      spanProcessor: processor
    }))
  ))

/**
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is the base URL of an OTLP/HTTP receiver (the collector's :4318);
 * spans are posted to `<endpoint>/v1/traces` in batches, flushed at shutdown.
 */
export const otlpTracing = (endpoint: string) =>
  tracingWith(new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint.replace(/\/+$/, "")}/v1/traces` })))

export const TracingLive: Layer.Layer<never, never, AppConfig> = Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
  Option.match(config.otelExporterOtlpEndpoint, {
    onNone: () => Layer.empty,
    onSome: (endpoint) => Layer.discard(otlpTracing(endpoint))
  })
))
