/**
 * Front door: the request's metrics (docs/operations.md#metrics--get-metrics, labelled by route
 * template, never the raw path) and its access log line (docs/operations.md#logs: one line per
 * request with its ids, the client's address and its user agent, the latter cut at
 * `USER_AGENT_LOG_MAX_BYTES`: a header is the client's to fill). Scrapes and
 * probes would drown the rest, so the unlimited paths log at debug; the line is built only when
 * its level is on (it is the only per-request allocation of the logger).
 */
import { Effect, LogLevel, References } from "effect"
import { truncateUtf8 } from "../AuditLogs/Storable.ts"
import { httpSeries } from "../Observability/Metrics.ts"
import { currentRequest, type RequestContext } from "../Domain/RequestContext.ts"

/** The most of a user agent an access line carries, in bytes of UTF-8 (the rest is cut, marked `…`). */
export const USER_AGENT_LOG_MAX_BYTES = 512

export interface Observation {
  /** Ends the in-progress gauge (runs however the request ends, interruption included). */
  readonly leave: Effect.Effect<void>
  /** Counts the answered request and writes its log line. */
  readonly finish: (status: number, ctx: RequestContext) => Effect.Effect<void>
}

export const observe = (method: string, endpoint: string, quiet: boolean): Observation => {
  const started = performance.now()
  const series = httpSeries(method, endpoint)
  series.inProgress.inc()
  const level: LogLevel.Severity = quiet ? "Debug" : "Info"
  return {
    leave: Effect.sync(() => series.inProgress.dec()),
    finish: (status, ctx) =>
      Effect.withFiber((fiber) => {
        const seconds = (performance.now() - started) / 1000
        series.total(status).inc()
        series.duration.observe(seconds)
        const durationMs = Math.round(seconds * 1000)
        if (!LogLevel.isGreaterThanOrEqualTo(level, fiber.getRef(References.MinimumLogLevel))) return Effect.void
        // The ids (and the trace id when no span is open) come from the request's facts (Logging.ts).
        return Effect.logWithLevel(level)("HTTP request").pipe(
          Effect.annotateLogs({
            method,
            endpoint,
            status_code: status,
            duration_ms: durationMs,
            client_ip: ctx.ip,
            user_agent: truncateUtf8(ctx.userAgent, USER_AGENT_LOG_MAX_BYTES)
          }),
          Effect.provideService(currentRequest, ctx)
        )
      })
  }
}
