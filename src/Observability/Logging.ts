/**
 * Effect's logger as JSON lines (production) or pretty (development), at `LOG_LEVEL` (docs/operations.md#logs).
 * Every line's `message` is one string: the first string logged; whatever else was logged with it
 * (an error, a dependency's reply) and the line's Cause go to `cause` — an expected failure as its
 * messages on one line, a defect (a bug) with its stack. Every line of a request carries its
 * correlation and request ids (annotated by the front door), the trace and span ids of the current
 * span and, once authenticated, the user id. As a last line of defence, values under sensitive
 * keys, anything shaped like a JWT or a bearer credential and the password of a URL are replaced
 * by `[REDACTED]`: no token, password or secret reaches a log.
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

/** `scheme://user:password@host`: the password (a `DATABASE_URL`, a `REDIS_URL` in a driver's message). */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:@/]*):[^\s@/]+@/gi

export const scrubText = (text: string): string =>
  text.replace(JWT, "[REDACTED]").replace(BEARER, "$1 [REDACTED]").replace(URL_PASSWORD, "$1:[REDACTED]@")

/** An error, then its causes (a few levels: SqlError → reason → the socket's error). */
export const causeChain = (error: unknown): ReadonlyArray<unknown> => {
  const chain: Array<unknown> = []
  let current = error
  while (current !== undefined && current !== null && chain.length < 8 && !chain.includes(current)) {
    chain.push(current)
    current = typeof current === "object" && "cause" in current ? current.cause : undefined
  }
  return chain
}

const messageOf = (error: unknown): string | undefined =>
  error instanceof Error ? error.message : typeof error === "object" && error !== null && "message" in error && typeof error.message === "string" ? error.message : undefined

const flat = (text: string) => scrubText(text.replace(/\s*\n\s*/g, " "))

/** Config errors read `SchemaError(<what> at ["NAME"])`. */
const SETTING = /^(?:ConfigError\()?SchemaError\(([\s\S]*?)\s+at \["([A-Z][A-Z0-9_]*)"\]\)+(?::[\s\S]*)?$/

/**
 * An error's words, each on one line with secrets removed: its own message, and its causes'
 * (repeats left out) — for a failure of a dependency, the dependency's own reply
 * (`PgConnection: Failed to connect` and `connect ECONNREFUSED 10.0.0.5:5432`). A configuration
 * error is `NAME: what is wrong`, with no cause. Anything else is shown as JSON.
 */
export const errorWords = (error: unknown): { readonly own: string; readonly causes?: string } => {
  if (typeof error === "string") return { own: flat(error) }
  const parts: Array<string> = []
  for (const e of causeChain(error)) {
    const message = messageOf(e)?.trim()
    if (message === undefined || message === "" || parts.some((p) => p.includes(message))) continue
    parts.push(message)
  }
  if (parts.length === 0) {
    return {
      own: flat(error instanceof Error ? error.name : typeof error === "object" && error !== null ? JSON.stringify(scrub(Inspectable.toJson(error))) ?? String(error) : String(error))
    }
  }
  const setting = SETTING.exec(parts.join(": "))
  if (setting !== null) return { own: flat(setting[1]!.startsWith(setting[2]!) ? setting[1]! : `${setting[2]!}: ${setting[1]!}`) }
  return parts.length === 1 ? { own: flat(parts[0]!) } : { own: flat(parts[0]!), causes: flat(parts.slice(1).join(": ")) }
}

/** An error as one line, secrets removed: its words joined (`PgConnection: Failed to connect: connect ECONNREFUSED 10.0.0.5:5432`). */
export const errorText = (error: unknown): string => {
  const words = errorWords(error)
  return words.causes === undefined ? words.own : `${words.own}: ${words.causes}`
}

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

/**
 * A Cause as text: each expected failure as its messages on one line (a dependency's reply needs
 * no stack), each defect — a bug — with its stack.
 */
const causeText = (cause: Cause.Cause<unknown>): string =>
  cause.reasons.map((reason) =>
    Cause.isFailReason(reason)
      ? errorText(reason.error)
      : Cause.isDieReason(reason)
      ? scrubText(reason.defect instanceof Error && reason.defect.stack !== undefined ? reason.defect.stack : errorText(reason.defect))
      : "Interrupted"
  ).join("\n")

/**
 * A line's `message` and `cause` (docs/operations.md#logs): the message is the first string logged
 * (`Effect.logWarning("Audit batch not written", error)`), everything else logged with it and the
 * Cause are the cause; a line logged with no string at all takes its cause's first line.
 */
export const messageAndCause = (message: unknown, cause: Cause.Cause<unknown>): { readonly message: string; readonly cause?: string } => {
  const parts = Array.isArray(message) ? message : [message]
  const at = parts.findIndex((p) => typeof p === "string")
  const extras = parts.filter((_, i) => i !== at).map(errorText)
  if (cause.reasons.length > 0) extras.push(causeText(cause))
  const text = at === -1 ? (extras[0]?.split("\n")[0] ?? "") : scrubText(parts[at] as string)
  return extras.length === 0 ? { message: text } : { message: text, cause: extras.join("\n") }
}

/** One JSON object per line: timestamp, level, message, then the annotations (ids first). */
export const jsonLinesLogger = (write: (line: string) => void): Logger.Logger<unknown, void> =>
  Logger.make(({ cause, date, fiber, logLevel, message }) => {
    const text = messageAndCause(message, cause)
    const record: Record<string, unknown> = {
      timestamp: date.toISOString(),
      level: logLevel.toUpperCase(),
      message: text.message
    }
    for (const [k, v] of annotationsOf(fiber)) record[k] = v
    const spans = fiber.getRef(References.CurrentLogSpans)
    if (spans.length > 0) {
      const now = date.getTime()
      record["spans"] = Object.fromEntries(spans.map(([label, startTime]) => [label, now - startTime]))
    }
    if (text.cause !== undefined) record["cause"] = text.cause
    write(JSON.stringify(record))
  })

const render = (value: unknown): string => (typeof value === "string" ? value : JSON.stringify(value) ?? String(value))

/**
 * Development lines: `time LEVEL message key=value …`, then the cause on its own lines. Same
 * annotations and scrubbing as the JSON lines.
 */
export const prettyLinesLogger = (write: (line: string) => void): Logger.Logger<unknown, void> =>
  Logger.make(({ cause, date, fiber, logLevel, message }) => {
    const text = messageAndCause(message, cause)
    let line = `[${date.toISOString()}] ${logLevel.toUpperCase().padEnd(5)} ${text.message}`
    for (const [k, v] of annotationsOf(fiber)) line += ` ${k}=${render(v)}`
    const now = date.getTime()
    for (const [label, startTime] of fiber.getRef(References.CurrentLogSpans)) line += ` ${label}=${now - startTime}ms`
    if (text.cause !== undefined) line += `\n${text.cause}`
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
