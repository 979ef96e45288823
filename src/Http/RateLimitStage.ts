/**
 * Front door stage 2 (docs/errors-and-limits.md#http-rate-limit): after the body size, before
 * authentication's 401 (docs/errors-and-limits.md#check-order). The budget is per user when the
 * request carries a valid token (the facts already hold its verification), else per client IP;
 * rejected requests count too. Every limited response carries the X-RateLimit-* headers.
 */
import { Effect, Option } from "effect"
import { HttpServerResponse } from "effect/http"
import { RateLimited } from "../Errors.ts"
import { rateLimitHitsTotal } from "../Observability/Metrics.ts"
import { makeAdmission } from "../RateLimit/Admission.ts"
import type { RateDecision } from "../RateLimit/Decision.ts"
import { type FailMode, type RateLimiter, rateLimitHeaders } from "../RateLimit/RateLimiter.ts"
import { clientErrorResponse } from "./ErrorResponse.ts"
import type { GenerationKey, RequestContext } from "../Domain/RequestContext.ts"

/** The X-RateLimit-* headers (and Retry-After when refused); HTTP header names go out lower case. */
export const applyRateHeaders = (response: HttpServerResponse.HttpServerResponse, d: RateDecision) =>
  HttpServerResponse.setHeaders(response, rateLimitHeaders(d))

export const makeRateLimitStage = (limiter: RateLimiter["Service"], options: {
  readonly limit: number
  readonly failMode: FailMode
}) => {
  const admission = makeAdmission(limiter, { limitType: "http", limit: options.limit, failMode: options.failMode })

  /**
   * The decision for this request (`None`: the store failed and the mode is open). `read`: a
   * read-cache generation whose value the decision carries back (`observed`).
   */
  const check = (ctx: RequestContext, read?: GenerationKey): Effect.Effect<Option.Option<RateDecision>> => {
    const key = ctx.user === undefined ? `ip:${ctx.ip}` : `user:${ctx.user.id}`
    return Effect.map(admission.check(`http:${key}`, read), (a) => (a._tag === "Refused" ? Option.some(a.decision) : a.decision))
  }

  /** The 429, counted in `rate_limit_hits_total{limit_type="http"}`. */
  const reject = (d: RateDecision) => {
    rateLimitHitsTotal.inc({ limit_type: "http" })
    return applyRateHeaders(clientErrorResponse(RateLimited.instance), d)
  }

  return { check, reject } as const
}
