/**
 * Front door stage 2 (CONTRACT §4, §9 check order): after the body size, before authentication's
 * 401. The budget is per user when the request carries a valid token (the facts already hold its
 * verification), else per client IP; rejected requests count too. Every limited response carries
 * the X-RateLimit-* headers.
 */
import { Effect, Option } from "effect"
import { HttpServerResponse } from "effect/http"
import { RateLimited } from "../Errors.ts"
import { rateLimitHitsTotal } from "../Observability/Metrics.ts"
import { type FailMode, type RateDecision, RateLimiter, withFailMode } from "../RateLimit/RateLimiter.ts"
import { json } from "./ErrorResponse.ts"
import type { RequestContext } from "../Edge/RequestContext.ts"

const WINDOW_MS = 60_000

export const applyRateHeaders = (response: HttpServerResponse.HttpServerResponse, d: RateDecision) =>
  HttpServerResponse.setHeaders(response, {
    "x-ratelimit-limit": String(d.limit),
    "x-ratelimit-remaining": String(d.remaining),
    "x-ratelimit-reset": String(d.resetSeconds)
  })

export const makeRateLimitStage = (limiter: RateLimiter["Service"], options: {
  readonly limit: number
  readonly failMode: FailMode
}) => {
  const failMode = withFailMode(options.failMode, "http", options.limit)

  /** The decision for this request (`None`: the store failed and the mode is open). */
  const check = (ctx: RequestContext): Effect.Effect<Option.Option<RateDecision>> => {
    const key = ctx.user === undefined ? `ip:${ctx.ip}` : `user:${ctx.user.id}`
    return failMode(limiter.hit(`http:${key}`, options.limit, WINDOW_MS))
  }

  /** The 429, counted in `rate_limit_hits_total{limit_type="http"}`. */
  const reject = (d: RateDecision) => {
    rateLimitHitsTotal.inc({ limit_type: "http" })
    return applyRateHeaders(
      HttpServerResponse.setHeader(json(429, { detail: RateLimited.instance.detail }), "retry-after", String(d.retryAfterSeconds)),
      d
    )
  }

  return { check, reject } as const
}
