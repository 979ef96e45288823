/**
 * The front door: one API-level middleware that every HTTP request passes, in the order of
 * CONTRACT §9 — body size (413) → rate limit (429) → [authentication (401) → role (403) →
 * validation (422) → handler, inside HttpApi] — and that turns every failure into a JSON
 * `{detail}` response (422 FastAPI shape, 404, 500 leaking nothing). On the way out it adds the
 * correlation id, request id, security and rate-limit headers, records metrics and the audit trail.
 */
import {
  type HttpApi,
  HttpApiBuilder,
  HttpApiError,
  HttpMethod,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Cause, Effect, FiberRef, LogLevel, Option } from "effect"
import type { IncomingMessage } from "node:http"
import { randomUUID } from "node:crypto"
import { captureRequestData } from "../AuditLogs/RequestData.ts"
import { AuditLog, outcomeOf } from "../AuditLogs/AuditLog.ts"
import { authenticateRequest } from "../Auth/Authentication.ts"
import { TokenVerifier } from "../Auth/TokenVerifier.ts"
import { AppConfig } from "../Config.ts"
import { errorStatus, InternalError, isClientError, PayloadTooLarge, RateLimited, RouteNotFound } from "../Errors.ts"
import { Unhealthy } from "../Observability/Api.ts"
import { httpSeries, rateLimitHitsTotal } from "../Observability/Metrics.ts"
import { type RateDecision, RateLimiter, withFailMode } from "../RateLimit/RateLimiter.ts"
import { clientIp } from "./ClientIp.ts"
import { textDepthExceeds, tooDeepMessage } from "./JsonDepth.ts"
import { correlationIdFrom, currentRequest, type RequestContext } from "./RequestContext.ts"
import { markInvalidUtf8 } from "./UrlText.ts"
import { contentTypeInvalid, endpointShapes, jsonInvalid, requestView, toValidationIssues, type ValidationIssue } from "./Validation.ts"

/** CONTRACT §4: never rate limited (nor audited). */
export const UNLIMITED_PATHS: ReadonlySet<string> = new Set([
  "/health", "/livez", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/asyncapi.json", "/proto/websocket.proto", "/web"
])

/** Paths whose handlers write their own audit record (a login is not a bearer-authenticated request). */
const SELF_AUDITED_PATHS: ReadonlySet<string> = new Set(["/login", "/login/refresh"])

const STRICT_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
/** Swagger UI, ReDoc and profiling reports are self-contained pages with inline script and style. */
const PAGE_CSP = "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; " +
  "img-src 'self' data: blob:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; " +
  "frame-ancestors 'none'; base-uri 'self'; form-action 'self'"

export const json = (status: number, body: unknown) => HttpServerResponse.unsafeJson(body, { status })

const detail = (status: number, text: string) => json(status, { detail: text })

const validationResponse = (issues: ReadonlyArray<ValidationIssue>) => json(422, { detail: issues })

type Api = HttpApi.HttpApi.Any

/** The route template for metrics labels and span names (`/authors/{author_id}`), never the raw path. */
export const routeLabeler = (api: Api) => {
  const shapes = endpointShapes(api)
  return (method: string, pathname: string): string => {
    if (UNLIMITED_PATHS.has(pathname)) return pathname
    const shape = shapes.find((s) => s.method === method && s.pattern.test(pathname))
    return shape?.template ?? "unmatched"
  }
}

const applyRateHeaders = (response: HttpServerResponse.HttpServerResponse, d: RateDecision) =>
  HttpServerResponse.setHeaders(response, {
    "x-ratelimit-limit": String(d.limit),
    "x-ratelimit-remaining": String(d.remaining),
    "x-ratelimit-reset": String(d.resetSeconds)
  })

const isJsonBody = (request: HttpServerRequest.HttpServerRequest) => {
  const contentType = request.headers["content-type"]
  return contentType === undefined || contentType.toLowerCase().includes("application/json")
}

/** The whole body as text, or `None` once it passes `maxBytes` (the rest is left unread). */
const readBounded = (source: IncomingMessage, maxBytes: number) =>
  Effect.async<Option.Option<string>>((resume) => {
    const chunks: Array<Buffer> = []
    let bytes = 0
    const done = (result: Option.Option<string>) => {
      source.off("data", onData).off("end", onEnd).off("error", onError)
      resume(Effect.succeed(result))
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > maxBytes) {
        source.pause()
        done(Option.none())
      } else chunks.push(chunk)
    }
    const onEnd = () => done(Option.some(Buffer.concat(chunks).toString("utf8")))
    const onError = () => done(Option.none()) // the upload broke off: closed like an oversize one
    source.on("data", onData).on("end", onEnd).on("error", onError)
  })

export const FrontDoorLive = (api: Api) =>
  HttpApiBuilder.middleware(
    Effect.gen(function*() {
      const config = yield* AppConfig
      const verifier = yield* TokenVerifier
      const limiter = yield* RateLimiter
      const audit = yield* AuditLog
      const shapes = endpointShapes(api)
      const labelOf = routeLabeler(api)
      const rateLimit = config.rateLimitPerMinute + config.rateLimitBurst

      /** A JSON body nested deeper than any request needs (Http/JsonDepth.ts); its text is cached by now. */
      const tooDeep = (request: HttpServerRequest.HttpServerRequest) =>
        HttpMethod.hasBody(request.method) && isJsonBody(request)
          ? Effect.map(Effect.orElseSucceed(request.text, () => ""), (text) => textDepthExceeds(text))
          : Effect.succeed(false)

      /** Maps anything the app failed with to a response; only true bugs become a 500. */
      const toResponse = (request: HttpServerRequest.HttpServerRequest, cause: Cause.Cause<unknown>) =>
        Effect.gen(function*() {
          const error = Cause.squash(cause)
          const isDecodeError = error instanceof HttpApiError.HttpApiDecodeError
          // Checked before the issues are rendered: echoing such a value overflows the stack.
          if ((isDecodeError || Cause.isDie(cause)) && (yield* tooDeep(request))) {
            return validationResponse([{ type: "value_error", loc: ["body"], msg: tooDeepMessage, input: null }])
          }
          if (isDecodeError) {
            const contentType = request.headers["content-type"]
            if (
              HttpMethod.hasBody(request.method) && contentType !== undefined &&
              !contentType.toLowerCase().includes("application/json") &&
              error.issues.some((i) => i.path.length === 0)
            ) {
              return validationResponse(contentTypeInvalid(contentType))
            }
            const body = HttpMethod.hasBody(request.method)
              ? yield* Effect.orElseSucceed(request.json, () => null)
              : null
            return validationResponse(toValidationIssues(shapes, error, requestView(request, body)))
          }
          // INTERFACE §GET /health: 503 with the health report's own shape, not `{detail}`.
          if (error instanceof Unhealthy) return json(503, error.report)
          if (isClientError(error)) return detail(errorStatus[error._tag].http, error.detail)
          if (typeof error === "object" && error !== null && "_tag" in error) {
            if (error._tag === "RouteNotFound") return detail(404, RouteNotFound.instance.detail)
            if (error._tag === "RequestError" && "reason" in error && error.reason === "Decode") {
              const cause = "cause" in error ? error.cause : undefined
              return validationResponse(jsonInvalid(cause instanceof Error ? cause.message : "Invalid JSON"))
            }
          }
          yield* Effect.logError("Unhandled error", cause)
          return detail(500, InternalError.instance.detail)
        })

      /**
       * Every request body is JSON (CONTRACT §3). The platform would otherwise decode form and
       * multipart bodies into the payload (and die on a malformed multipart body), so any other
       * content type is presented to the app as text: the payload decode then fails after
       * authentication, and `toResponse` answers the 422 for the wrong content type.
       */
      const jsonOnly = (request: HttpServerRequest.HttpServerRequest) =>
        isJsonBody(request) ? request : request.modify({ headers: { ...request.headers, "content-type": "text/plain" } })

      /** The request as the app sees it: JSON bodies only (above), and percent-escapes that are not UTF-8 marked as NUL (Http/UrlText.ts). */
      const present = (request: HttpServerRequest.HttpServerRequest) => {
        const url = markInvalidUtf8(request.url)
        const marked = url === request.url ? request : request.modify({ url })
        return jsonOnly(marked)
      }

      /**
       * 413 before anything else: `None` when the body is over the limit, else the request to go on
       * with. A body without Content-Length (chunked) is read here, under the limit, straight from
       * the socket: the platform's own bounded read destroys the request — and with it the
       * connection — when the limit is passed, so no 413 could be answered. Under the limit the app
       * gets the same request with the body read.
       */
      const checkBodySize = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<Option.Option<HttpServerRequest.HttpServerRequest>> => {
        if (!HttpMethod.hasBody(request.method)) return Effect.succeed(Option.some(request))
        const length = request.headers["content-length"]
        if (length !== undefined) return Effect.succeed(Number(length) > config.maxRequestBodyBytes ? Option.none() : Option.some(request))
        if (request.headers["transfer-encoding"] === undefined) return Effect.succeed(Option.some(request))
        return readBounded(NodeHttpServerRequest.toIncomingMessage(request), config.maxRequestBodyBytes).pipe(
          Effect.map(Option.map((body) => {
            const { "transfer-encoding": _, ...headers } = request.headers
            return HttpServerRequest.fromWeb(new Request(`http://localhost${request.url}`, { method: request.method, headers, body }))
          }))
        )
      }

      const checkRateLimit = (ctx: RequestContext) =>
        Effect.gen(function*() {
          const principal = yield* Effect.option(authenticateRequest(verifier))
          const key = Option.match(principal, { onNone: () => `ip:${ctx.ip}`, onSome: (p) => `user:${p.id}` })
          return yield* limiter.hit(`http:${key}`, rateLimit, 60_000).pipe(withFailMode(config.rateLimitFailMode, "http", rateLimit))
        })

      return (app) =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const queryStart = request.url.indexOf("?")
          const pathname = queryStart === -1 ? request.url : request.url.slice(0, queryStart)
          const ctx: RequestContext = {
            requestId: randomUUID(),
            correlationId: correlationIdFrom(request.headers["x-correlation-id"]),
            startedAt: new Date(),
            ip: clientIp(Option.getOrUndefined(request.remoteAddress), request.headers["x-forwarded-for"], config.trustedProxies),
            userAgent: request.headers["user-agent"] ?? "",
            auth: undefined,
            user: undefined,
            route: undefined
          }
          const label = labelOf(request.method, pathname)
          const limited = config.rateLimitEnabled && !UNLIMITED_PATHS.has(pathname)
          const started = performance.now()
          const series = httpSeries(request.method, label)
          series.inProgress.inc()

          // The request whose body the app, the error mapping and the audit read (checkBodySize).
          let withBody = request
          const run = Effect.gen(function*() {
            const bodyChecked = yield* checkBodySize(request)
            // Over the limit, the rest of the body is not read: the connection closes after the 413.
            if (Option.isNone(bodyChecked)) return HttpServerResponse.setHeader(detail(413, PayloadTooLarge.instance.detail), "connection", "close")
            withBody = bodyChecked.value
            let rate: Option.Option<RateDecision> = Option.none()
            if (limited) {
              rate = yield* checkRateLimit(ctx)
              if (Option.isSome(rate) && !rate.value.allowed) {
                rateLimitHitsTotal.inc({ limit_type: "http" })
                return applyRateHeaders(
                  HttpServerResponse.setHeader(detail(429, RateLimited.instance.detail), "retry-after", String(rate.value.retryAfterSeconds)),
                  rate.value
                )
              }
            }
            // The body is within the limit by now (checkBodySize), so the app needs no MaxBodySize of
            // its own; and the request is provided again only if `present` changed it. Each would
            // copy the fiber's whole context on every request.
            const presented = present(withBody)
            const response = yield* (presented === request ? app : Effect.provideService(app, HttpServerRequest.HttpServerRequest, presented)).pipe(
              Effect.catchAllCause((cause) =>
                Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : toResponse(withBody, cause)
              )
            )
            return Option.isSome(rate) ? applyRateHeaders(response, rate.value) : response
          }).pipe(
            // CONTRACT §3/§8: every log line of the request carries its ids — the logger reads them
            // from `currentRequest` (Observability/Logging.ts, with the trace and user ids).
            Effect.locally(currentRequest, ctx)
          )

          const response = yield* run.pipe(Effect.ensuring(Effect.sync(() => series.inProgress.dec())))
          const status = response.status
          const seconds = (performance.now() - started) / 1000
          series.total(status).inc()
          series.duration.observe(seconds)
          // Scrapes and probes would drown the rest: they log at debug. The line is built only when
          // its level is on (it is the only per-request allocation of the logger).
          const level = UNLIMITED_PATHS.has(pathname) ? LogLevel.Debug : LogLevel.Info
          if (LogLevel.greaterThanEqual(level, yield* FiberRef.get(FiberRef.currentMinimumLogLevel))) {
            yield* Effect.logWithLevel(level, "HTTP request").pipe(
              Effect.annotateLogs({
                correlation_id: ctx.correlationId,
                request_id: ctx.requestId,
                method: request.method,
                endpoint: label,
                status_code: status,
                duration_ms: Math.round(seconds * 1000),
                ...(ctx.user !== undefined ? { user_id: ctx.user.id } : {})
              })
            )
          }

          if (ctx.user !== undefined && !UNLIMITED_PATHS.has(pathname) && !SELF_AUDITED_PATHS.has(pathname)) {
            // Only a JSON body is recorded; any other was consumed by the app through `jsonOnly`.
            const body = HttpMethod.hasBody(request.method) && isJsonBody(request)
              ? yield* Effect.orElseSucceed(withBody.json, () => undefined)
              : undefined
            const query = queryStart === -1 ? undefined : Object.fromEntries(new URLSearchParams(request.url.slice(queryStart + 1)))
            yield* audit.record({
              timestamp: ctx.startedAt,
              user_id: ctx.user.id,
              username: ctx.user.username,
              user_roles: ctx.user.roles,
              action_type: request.method,
              resource: pathname,
              outcome: outcomeOf(status),
              ip_address: ctx.ip,
              user_agent: ctx.userAgent,
              request_id: ctx.requestId,
              correlation_id: ctx.correlationId,
              response_status: status,
              duration_ms: Math.round(seconds * 1000),
              request_data: captureRequestData(query, body),
              error_message: status >= 400 ? errorMessageOf(response) : null
            })
          }

          const contentType = response.headers["content-type"] ?? ""
          return HttpServerResponse.setHeaders(response, {
            "x-correlation-id": ctx.correlationId,
            "x-request-id": ctx.requestId,
            "x-content-type-options": "nosniff",
            "x-frame-options": "DENY",
            "referrer-policy": "no-referrer",
            "content-security-policy": contentType.startsWith("text/html") ? PAGE_CSP : STRICT_CSP,
            ...(status === 401 ? { "www-authenticate": "Bearer" } : {})
          })
        })
    }),
    { withContext: true }
  )

/** The `detail` of a JSON error body, for the audit record. */
const errorMessageOf = (response: HttpServerResponse.HttpServerResponse): string | null => {
  const body = response.body
  if (body._tag !== "Uint8Array") return `HTTP ${response.status}`
  try {
    const parsed = JSON.parse(new TextDecoder().decode(body.body)) as { detail?: unknown }
    return typeof parsed.detail === "string" ? parsed.detail : JSON.stringify(parsed.detail ?? null).slice(0, 1000)
  } catch {
    return `HTTP ${response.status}`
  }
}
