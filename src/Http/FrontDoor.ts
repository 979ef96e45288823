/**
 * The front door: one global router middleware that every HTTP request passes, in the order of
 * docs/errors-and-limits.md#check-order — body size (413, BodyLimit.ts) → rate limit (429, RateLimitStage.ts) →
 * the early stages → [authentication (401) → role (403) → validation (422) → handler, inside
 * HttpApi] — turning every failure into a JSON `{detail}` response (ErrorResponse.ts). On the way
 * out: metrics and the access log (AccessLog.ts), the audit record (AuditStage.ts), then the ids
 * and security headers (Correlation.ts, SecurityHeaders.ts, Cors.ts — whose preflights are
 * answered first, after the body's size only). The request's facts are one immutable `RequestContext` (Correlation.ts), built
 * here and read by everything inside.
 *
 * The early stages are what a feature hands the front door (`layer(api, { early })`, wired in
 * App.ts; `EarlyStage`), which knows no feature itself: before the rate check a stage claims a
 * request and names a generation the check also reads; after it, the stage may answer the request
 * itself, without the router and HttpApi — at once, or by an effect whose failures become the
 * same JSON error responses as the app's, and which may still hand the request to the app. The one
 * there is: the authors' early answers (Authors/Http.ts `early`: their reads and writes,
 * docs/architecture.md#the-request-path). With tracing on, no early stage answers: every request
 * goes through the app, whose spans a trace shows.
 *
 * With `ADMIN_PORT` set, the front door is also where the two ports part (`portRefuses`): the
 * admin listener hands its requests to this same app (Http/NodeServer.ts), marked, and only those
 * get `/metrics` and `/api/profiling/*`; on `PORT` those paths are unknown routes (404), and the
 * admin port serves nothing but them and the probes.
 */
import { Cause, Effect, Option, References } from "effect"
import { FindMyWay, Headers, HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import type { HttpApi, HttpApiGroup } from "effect/http-api"
import { AuditLog } from "../AuditLogs/AuditLog.ts"
import { TokenVerifier } from "../Auth/TokenVerifier.ts"
import { AppConfig } from "../Config.ts"
import { PayloadTooLarge, RouteNotFound } from "../Errors.ts"
import type { RateDecision } from "../RateLimit/Decision.ts"
import { RateLimiter } from "../RateLimit/RateLimiter.ts"
import { observe } from "./AccessLog.ts"
import { makeAuditStage } from "./AuditStage.ts"
import { makeBodyLimit } from "./BodyLimit.ts"
import { makeCors } from "./Cors.ts"
import { idHeaders, makeCorrelation } from "./Correlation.ts"
import { clientErrorResponse, makeErrorResponse } from "./ErrorResponse.ts"
import { onAdminPort } from "./NodeServer.ts"
import { applyRateHeaders, makeRateLimitStage } from "./RateLimitStage.ts"
import { currentRequest, type GenerationKey, type RequestContext } from "../Domain/RequestContext.ts"
import { securityHeaders } from "./SecurityHeaders.ts"
import { markInvalidUtf8 } from "./UrlText.ts"
import { type EndpointShape, endpointShapes, findShape, routeTemplate } from "./Validation.ts"

/** Never rate limited (docs/errors-and-limits.md#http-rate-limit), nor audited. */
export const UNLIMITED_PATHS: ReadonlySet<string> = new Set([
  "/health", "/livez", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/asyncapi.json", "/proto/websocket.proto",
  "/web"
])

/**
 * Which side of `ADMIN_PORT` a path belongs to, matched as the app's router matches (same router,
 * same options: case, trailing and duplicate slashes, percent-escapes): the admin routes, the
 * probes (served on both ports), or neither.
 */
const makePortSides = (routerConfig: Partial<FindMyWay.RouterConfig>) => {
  const sides = FindMyWay.make<"admin" | "probe">(routerConfig)
  sides.all("/metrics", "admin")
  sides.all("/api/profiling/*", "admin")
  for (const probe of ["/livez", "/readyz", "/health"] as const) sides.all(probe, "probe")
  return (method: string, url: string) => sides.find(method, markInvalidUtf8(url))?.handler
}

/** The path as the router matches it: duplicate slashes are one (FindMyWay `ignoreDuplicateSlashes`). */
const routedPath = (pathname: string) => pathname.includes("//") ? pathname.replace(/\/{2,}/g, "/") : pathname

const shapeOf = (shapes: ReadonlyArray<EndpointShape>, method: string, pathname: string) =>
  findShape(shapes, method, routedPath(pathname))

const pathnameOf = (url: string) => {
  const queryStart = url.indexOf("?")
  return queryStart === -1 ? url : url.slice(0, queryStart)
}

/** A wrong method on a known path (405) is labelled with that path's route template too. */
const labelOf = (shapes: ReadonlyArray<EndpointShape>, method: string, pathname: string): string =>
  UNLIMITED_PATHS.has(pathname) ? pathname : routeTemplate(shapes, method, routedPath(pathname)) ?? "unmatched"

/** The route template of a request URL for span names (`/authors/{author_id}`), never the raw path; the metrics use the same. */
export const routeLabeler = <Id extends string, Groups extends HttpApiGroup.Constraint>(api: HttpApi.HttpApi<Id, Groups>) => {
  const shapes = endpointShapes(api)
  return (method: string, url: string): string => labelOf(shapes, method, pathnameOf(url))
}

const JSON_TYPE = "application/json"

/**
 * The request as the app sees it: percent-escapes that are not UTF-8 marked as NUL
 * (Http/UrlText.ts), and any JSON media type (`…application/json…`) presented as
 * `application/json`, the one HttpApi decodes. The same request unless something changed, so the
 * body the platform caches per request object is read once.
 */
const present = (request: HttpServerRequest.HttpServerRequest) => {
  const url = markInvalidUtf8(request.url)
  const contentType = request.headers["content-type"]
  const lower = contentType?.toLowerCase()
  const relabel = lower !== undefined && lower.includes(JSON_TYPE) && lower.split(";")[0]!.trim() !== JSON_TYPE
  if (url === request.url && !relabel) return request
  return request.modify({
    url,
    ...(relabel ? { headers: Headers.set(request.headers, "content-type", JSON_TYPE) } : {})
  })
}

/**
 * The request on its way through the front door: one record each stage reads and passes on (a
 * new one when it learned something), instead of the same values in every stage's parameters.
 */
interface Passage {
  /** The request as it arrived (the audit record's method, path and query). */
  readonly request: HttpServerRequest.HttpServerRequest
  /** The request as the app reads it (`present`); its body is where the error mapping and the audit read it. */
  readonly presented: HttpServerRequest.HttpServerRequest
  readonly pathname: string
  /** The endpoint the request is routed to, if any. */
  readonly shape: EndpointShape | undefined
  /** Whether the rate limit applies. */
  readonly limited: boolean
  /** The request's facts, as far as they are known. */
  readonly ctx: RequestContext
}

interface Answered {
  readonly passage: Passage
  readonly response: HttpServerResponse.HttpServerResponse
}

/**
 * A stage a feature hands the front door (see the header): it sees each request before the rate
 * check, and may answer it after.
 */
export interface EarlyStage {
  /**
   * Before the rate check, from the request as the app reads it (`template`: its route, if any):
   * undefined when the stage has nothing to do with it.
   */
  readonly claim: (method: string, template: string | undefined, url: string) => EarlyClaim | undefined
}

/**
 * An early stage's answer: a response at once, or an effect that makes one (its failures are
 * mapped as the app's are) or finds, after all, that the app must decide (undefined).
 */
export type EarlyAnswer =
  | HttpServerResponse.HttpServerResponse
  | Effect.Effect<HttpServerResponse.HttpServerResponse | undefined, unknown>

export interface EarlyClaim {
  /** A generation the rate check reads in the same round trip; what it observed is the request's `observed`. */
  readonly generation: GenerationKey | undefined
  /**
   * After the rate check, with the request's facts: the answer, or undefined for the app. Called
   * for an admitted request only.
   */
  readonly answer: (request: HttpServerRequest.HttpServerRequest, ctx: RequestContext) => EarlyAnswer | undefined
}

export interface FrontDoorOptions<R> {
  /** The early stages, in order: the first that claims a request has it. */
  readonly early?: ReadonlyArray<Effect.Effect<EarlyStage, never, R>>
}

export const layer = <Id extends string, Groups extends HttpApiGroup.Constraint, R = never>(
  api: HttpApi.HttpApi<Id, Groups>,
  options: FrontDoorOptions<R> = {}
) =>
  HttpRouter.middleware(
    Effect.gen(function*() {
      const config = yield* AppConfig
      const verifier = yield* TokenVerifier
      const limiter = yield* RateLimiter
      const audit = yield* AuditLog
      const shapes = endpointShapes(api)
      const facts = makeCorrelation(config.trustedProxies, verifier)
      const bodyLimit = makeBodyLimit(config.maxRequestBodyBytes)
      const rateLimit = makeRateLimitStage(limiter, {
        limit: config.rateLimitPerMinute + config.rateLimitBurst,
        failMode: config.rateLimitFailMode
      })
      const errors = makeErrorResponse(shapes)
      const recordAudit = makeAuditStage(audit, UNLIMITED_PATHS)
      const stages = yield* Effect.all(options.early ?? [])
      const claimOf = (method: string, template: string | undefined, url: string): EarlyClaim | undefined => {
        for (const stage of stages) {
          const claim = stage.claim(method, template, url)
          if (claim !== undefined) return claim
        }
        return undefined
      }
      // With tracing on, every request goes through the app, whose spans a trace shows.
      const earlyAnswers = !(yield* References.TracerEnabled)
      const cors = makeCors(config.corsAllowedOrigins)
      // Over the limit, the rest of the body is not read: the connection closes after the 413.
      const tooLarge = HttpServerResponse.setHeader(clientErrorResponse(PayloadTooLarge.instance), "connection", "close")
      const sideOf = Option.isSome(config.adminPort) ? makePortSides(yield* HttpRouter.RouterConfig) : undefined
      /** With ADMIN_PORT: the admin paths on PORT, anything but them and the probes on ADMIN_PORT. */
      const portRefuses = (request: HttpServerRequest.HttpServerRequest) => {
        if (sideOf === undefined) return false
        const side = sideOf(request.method, request.url)
        return onAdminPort(request.source) ? side === undefined : side === "admin"
      }
      const notFound = Effect.succeed(clientErrorResponse(RouteNotFound.instance))

      /** Body size → authentication (once, when anything will ask) → rate limit → an early stage or the app. */
      const admit = <E>(arrived: Passage, app: Effect.Effect<HttpServerResponse.HttpServerResponse, E>): Effect.Effect<Answered, E> =>
        Effect.gen(function*() {
          const checked = yield* bodyLimit(arrived.request)
          if (Option.isNone(checked)) return { passage: arrived, response: tooLarge }
          const presented = present(checked.value)
          const passage: Passage = {
            ...arrived,
            presented,
            ctx: arrived.limited || arrived.shape?.secured === true ? yield* facts.authenticate(arrived.ctx, presented) : arrived.ctx
          }
          // From here on, every log line of the request carries its ids — the logger reads them
          // from `currentRequest` (Observability/Logging.ts, with the trace and user ids;
          // docs/operations.md#logs) — provided once for the rate check and the app (each provide copies
          // the request's context).
          return yield* Effect.provideService(limitedAndServed(passage, app), currentRequest, passage.ctx)
        })

      /**
       * Rate limit → an early stage's answer (the authors' cached reads) or the app, whose failures
       * become the JSON error responses. The rate check of a request a stage claims also reads the
       * generation the stage names (an author read's, in the read cache); the request's facts carry
       * what it observed to the stage and the handler.
       */
      const limitedAndServed = <E>(admitted: Passage, app: Effect.Effect<HttpServerResponse.HttpServerResponse, E>): Effect.Effect<Answered, E> =>
        Effect.gen(function*() {
          let rate: RateDecision | undefined
          let passage = admitted
          const claim = claimOf(passage.presented.method, passage.shape?.template, passage.presented.url)
          if (passage.limited) {
            const generation = claim?.generation
            const decision = yield* rateLimit.check(passage.ctx, generation)
            if (Option.isSome(decision)) {
              if (!decision.value.allowed) return { passage, response: rateLimit.reject(decision.value) }
              rate = decision.value
              if (generation !== undefined && rate.observed !== undefined) {
                passage = { ...passage, ctx: { ...passage.ctx, observed: { key: generation.key, value: rate.observed } } }
              }
            }
          }
          const early = earlyAnswers ? claim?.answer(passage.presented, passage.ctx) : undefined
          const response = early === undefined
            ? yield* served(passage, admitted, app)
            : Effect.isEffect(early)
            ? yield* served(passage, admitted, Effect.flatMap(early, (answer) => (answer === undefined ? app : Effect.succeed(answer))))
            : early
          return { passage, response: rate === undefined ? response : applyRateHeaders(response, rate) }
        })

      /**
       * The app (or an early stage's effect, which may hand the request to it), with the request
       * (and its facts) provided again only if they changed (each provide adds to the context).
       */
      const served = <E>(passage: Passage, admitted: Passage, app: Effect.Effect<HttpServerResponse.HttpServerResponse, E>) => {
        const { request, presented, ctx } = passage
        const withFacts = ctx === admitted.ctx ? app : Effect.provideService(app, currentRequest, ctx)
        const withRequest = presented === request ? withFacts : Effect.provideService(withFacts, HttpServerRequest.HttpServerRequest, presented)
        return withRequest.pipe(
          Effect.map((response) => errors.fromResponse(presented, response)),
          // An interruption has no failure of its own: only it goes on.
          Effect.catchCause((cause) => Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause as Cause.Cause<never>) : errors.fromCause(presented, cause))
        )
      }

      return (app) =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const pathname = pathnameOf(request.url)
          // A path this port does not serve is an unknown route here: 404, labelled, limited and logged as one.
          const refused = portRefuses(request)
          const unlimited = !refused && UNLIMITED_PATHS.has(pathname)
          const label = refused ? "unmatched" : labelOf(shapes, request.method, pathname)
          const base = facts.begin(request)
          const preflight = cors?.preflight(request)
          if (preflight !== undefined) {
            // A preflight is answered before anything but the body's size (a body over the limit: 413 first, whatever the method).
            const answer = Option.isSome(yield* bodyLimit(request)) ? preflight : tooLarge
            return HttpServerResponse.setHeaders(answer, { ...idHeaders(base), ...securityHeaders(answer) })
          }
          const observation = observe(request.method, label, unlimited)
          const arrived: Passage = {
            request,
            presented: request,
            pathname,
            shape: refused ? undefined : shapeOf(shapes, request.method, pathname),
            limited: config.rateLimitEnabled && !unlimited,
            ctx: base
          }

          const { passage, response } = yield* admit(arrived, refused ? notFound : app).pipe(Effect.ensuring(observation.leave))
          yield* observation.finish(response.status, passage.ctx)
          yield* recordAudit(passage, response)
          return HttpServerResponse.setHeaders(response, { ...idHeaders(passage.ctx), ...securityHeaders(response), ...cors?.headers(request) })
        })
    }),
    { global: true }
  )
