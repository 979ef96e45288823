/**
 * Effect's logger as JSON lines (production) or pretty (development), at `LOG_LEVEL` (docs/operations.md#logs).
 * Every line of a request carries its correlation and request ids (annotated by the front door),
 * the trace and span ids of the current span and, once authenticated, the user id. As a last line
 * of defence, values under sensitive keys and anything shaped like a JWT or a bearer credential are
 * replaced by `[REDACTED]`: no token, password or secret reaches a log.
 */
import { Cause, type Fiber, Inspectable, Layer, Logger, type LogLevel, References } from "effect"
import { AppConfig, type AppConfigShape } from "../Config.ts"
import { currentRequest } from "../Domain/RequestContext.ts"
import { isSecretKey, redactWith } from "../Domain/Secrets.ts"

const levels: { readonly [K in AppConfigShape["logLevel"]]: LogLevel.LogLevel } = {
  trace: "Trace",
  debug: "Debug",
  info: "Info",
  warning: "Warn",
  error: "Error",
  fatal: "Fatal",
  none: "None"
}

/** Broader than the audit's secret names (docs/audit.md#what-is-recorded; it includes them): a log line has no use for either. */
const SENSITIVE_KEY = /pass(word|wd)?|secret|token|authorization|api[_-]?key|cookie|credential/i
const isSensitiveKey = (key: string) => SENSITIVE_KEY.test(key) || isSecretKey(key)
const JWT = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/g
const BEARER = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi

export const scrubText = (text: string): string => text.replace(JWT, "[REDACTED]").replace(BEARER, "$1 [REDACTED]")

/**
 * Deep copy with sensitive keys and credential-shaped strings redacted; below 8 levels only strings
 * are still scrubbed (what is nested deeper is left as it is).
 */
export const scrub = redactWith({
  isSecret: isSensitiveKey,
  text: scrubText,
  maxDepth: 8,
  beyond: (value) => (typeof value === "string" ? scrubText(value) : value)
})

/**
 * The line's annotations: the current span's trace ids (else the request's or the WebSocket
 * connection's own trace id), the request's correlation/request/user ids (an explicit annotation
 * wins), then the fiber's log annotations — all scrubbed.
 */
const annotationsOf = (fiber: Fiber.Fiber<unknown, unknown>): Array<readonly [string, unknown]> => {
  const out = new Map<string, unknown>()
  const span = fiber.cache.span
  const traced = span !== undefined && fiber.cache.tracerEnabled
  const request = fiber.getRef(currentRequest)
  if (traced) {
    out.set("trace_id", span.traceId)
    out.set("span_id", span.spanId)
  } else if (request !== undefined) {
    out.set("trace_id", request.traceId)
  }
  const annotations = fiber.getRef(References.CurrentLogAnnotations)
  if (request !== undefined) {
    if (!("correlation_id" in annotations)) out.set("correlation_id", request.correlationId)
    if (!("request_id" in annotations)) out.set("request_id", request.requestId)
    if (request.user !== undefined && !("user_id" in annotations)) out.set("user_id", request.user.id)
  }
  // A WebSocket connection annotates its own trace id (Ws/Server.ts); an open span's wins.
  for (const [k, v] of Object.entries(annotations)) if (!(traced && (k === "trace_id" || k === "span_id"))) out.set(k, v)
  return Array.from(out, ([k, v]) => [k, isSensitiveKey(k) ? "[REDACTED]" : scrub(v)] as const)
}

const messageText = (message: unknown): unknown => {
  const parts = Array.isArray(message) ? message : [message]
  // An Error serialises to `{}`: show its name and message instead.
  const rendered = parts.map((p) => (typeof p === "string" ? p : p instanceof Error ? String(p) : Inspectable.toJson(p)))
  return rendered.length === 1 ? rendered[0] : rendered
}

/** One JSON object per line: timestamp, level, message, then the annotations (ids first). */
export const jsonLinesLogger = (write: (line: string) => void): Logger.Logger<unknown, void> =>
  Logger.make(({ cause, date, fiber, logLevel, message }) => {
    const record: Record<string, unknown> = {
      timestamp: date.toISOString(),
      level: logLevel.toUpperCase(),
      message: scrub(messageText(message))
    }
    for (const [k, v] of annotationsOf(fiber)) record[k] = v
    const spans = fiber.getRef(References.CurrentLogSpans)
    if (spans.length > 0) {
      const now = date.getTime()
      record["spans"] = Object.fromEntries(spans.map(([label, startTime]) => [label, now - startTime]))
    }
    if (cause.reasons.length > 0) record["cause"] = scrubText(Cause.pretty(cause))
    write(JSON.stringify(record))
  })

const render = (value: unknown): string => (typeof value === "string" ? value : JSON.stringify(value) ?? String(value))

/**
 * Development lines: `time LEVEL message key=value …`, then the cause on its own lines. Same
 * annotations and scrubbing as the JSON lines.
 */
export const prettyLinesLogger = (write: (line: string) => void): Logger.Logger<unknown, void> =>
  Logger.make(({ cause, date, fiber, logLevel, message }) => {
    const text = scrub(messageText(message))
    let line = `[${date.toISOString()}] ${logLevel.toUpperCase().padEnd(5)} ${Array.isArray(text) ? text.map(render).join(" ") : render(text)}`
    for (const [k, v] of annotationsOf(fiber)) line += ` ${k}=${render(v)}`
    const now = date.getTime()
    for (const [label, startTime] of fiber.getRef(References.CurrentLogSpans)) line += ` ${label}=${now - startTime}ms`
    if (cause.reasons.length > 0) line += `\n${scrubText(Cause.pretty(cause))}`
    write(line)
  })

const stdout = (line: string) => {
  process.stdout.write(`${line}\n`)
}

/** The logger for a format, writing to stdout (or `write`, for tests); replaces Effect's default logger. */
export const layerLoggerTo = (format: "json" | "pretty", write?: (line: string) => void): Layer.Layer<never> =>
  Logger.layer([format === "json" ? jsonLinesLogger(write ?? stdout) : prettyLinesLogger(write ?? stdout)])

export const layerLogger: Layer.Layer<never, never, AppConfig> = Layer.unwrap(
  AppConfig.useSync((config) =>
    Layer.merge(layerLoggerTo(config.logFormat), Layer.succeed(References.MinimumLogLevel, levels[config.logLevel]))
  )
)
