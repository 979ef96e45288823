/**
 * Effect's logger as JSON lines (production) or pretty (development), at `LOG_LEVEL` (CONTRACT §8).
 * Every line of a request carries its correlation and request ids (annotated by the front door),
 * the trace and span ids of the current span and, once authenticated, the user id. As a last line
 * of defence, values under sensitive keys and anything shaped like a JWT or a bearer credential are
 * replaced by `[REDACTED]`: no token, password or secret reaches a log.
 */
import { Cause, Context, Effect, FiberRef, FiberRefs, HashMap, Inspectable, Layer, List, Logger, LogLevel, Option, Tracer } from "effect"
import { AppConfig } from "../Config.ts"
import { currentRequest } from "../Http/RequestContext.ts"

const levels = {
  trace: LogLevel.Trace,
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  fatal: LogLevel.Fatal,
  none: LogLevel.None
} as const

const SENSITIVE_KEY = /pass(word|wd)?|secret|token|authorization|api[_-]?key|cookie|credential/i
const JWT = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/g
const BEARER = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi

export const scrubText = (text: string): string => text.replace(JWT, "[REDACTED]").replace(BEARER, "$1 [REDACTED]")

/** Deep copy with sensitive keys and credential-shaped strings redacted. */
export const scrub = (value: unknown, depth = 0): unknown => {
  if (typeof value === "string") return scrubText(value)
  if (depth > 8 || typeof value !== "object" || value === null) return value
  if (Array.isArray(value)) return value.map((v) => scrub(v, depth + 1))
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) out[k] = SENSITIVE_KEY.test(k) ? "[REDACTED]" : scrub(v, depth + 1)
  return out
}

/** The request's correlation/user ids and the current span's trace ids, as annotations. */
const contextAnnotations = (fiberRefs: FiberRefs.FiberRefs, annotations: HashMap.HashMap<string, unknown>) => {
  let out = annotations
  const context = FiberRefs.getOrDefault(fiberRefs, FiberRef.currentContext)
  const span = Context.getOption(context, Tracer.ParentSpan)
  if (Option.isSome(span)) {
    out = HashMap.set(HashMap.set(out, "trace_id", span.value.traceId), "span_id", span.value.spanId)
  }
  const request = FiberRefs.getOrDefault(fiberRefs, currentRequest)
  if (request !== undefined) {
    if (!HashMap.has(out, "correlation_id")) out = HashMap.set(out, "correlation_id", request.correlationId)
    if (!HashMap.has(out, "request_id")) out = HashMap.set(out, "request_id", request.requestId)
    if (request.user !== undefined && !HashMap.has(out, "user_id")) out = HashMap.set(out, "user_id", request.user.id)
  }
  return HashMap.map(out, (v, k) => (SENSITIVE_KEY.test(k) ? "[REDACTED]" : scrub(v)))
}

const enrich = <M, O>(logger: Logger.Logger<M, O>): Logger.Logger<M, O> =>
  Logger.mapInputOptions(logger, (options) => ({ ...options, annotations: contextAnnotations(options.context, options.annotations) }))

const messageText = (message: unknown): unknown => {
  const parts = Array.isArray(message) ? message : [message]
  const rendered = parts.map((p) => (typeof p === "string" ? p : Inspectable.toJSON(p)))
  return rendered.length === 1 ? rendered[0] : rendered
}

/** One JSON object per line: timestamp, level, message, then the annotations (ids first). */
export const jsonLinesLogger = (write: (line: string) => void) =>
  enrich(Logger.make(({ annotations, cause, date, logLevel, message, spans }) => {
    const record: Record<string, unknown> = {
      timestamp: date.toISOString(),
      level: logLevel.label,
      message: scrub(messageText(message))
    }
    for (const [k, v] of annotations) record[k] = v
    if (List.isCons(spans)) {
      const now = date.getTime()
      record["spans"] = Object.fromEntries(Array.from(spans, (s) => [s.label, now - s.startTime]))
    }
    if (!Cause.isEmpty(cause)) record["cause"] = scrubText(Cause.pretty(cause, { renderErrorCause: true }))
    write(JSON.stringify(record))
  }))

const prettyLogger = enrich(Logger.prettyLoggerDefault)

/** The logger for a format, writing to stdout (or `write`, for tests). */
export const loggerLayer = (format: "json" | "pretty", write?: (line: string) => void) =>
  Logger.replace(
    Logger.defaultLogger,
    format === "json"
      ? jsonLinesLogger(write ?? ((line) => process.stdout.write(`${line}\n`)))
      : Logger.mapInputOptions(prettyLogger, (o) => ({ ...o, message: scrub(o.message) }))
  )

export const LoggerLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
  Layer.merge(loggerLayer(config.logFormat), Logger.minimumLogLevel(levels[config.logLevel]))
))
