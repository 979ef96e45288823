/**
 * Front door: the request's facts, learned once when it arrives — request id, correlation id
 * (docs/http-api.md#conventions), trace id for the logs, client IP (trusted proxies:
 * docs/errors-and-limits.md#http-rate-limit) — and, when anything
 * will ask for it, its authentication (once per request: the rate limiter keys by it and the
 * security middleware reads it). The result is the one immutable `RequestContext`.
 */
import { Effect, Exit, Option } from "effect"
import type { HttpServerRequest } from "effect/http"
import { randomUUID } from "node:crypto"
import { authenticateHeader } from "../Auth/Authentication.ts"
import type { TokenVerifier } from "../Auth/TokenVerifier.ts"
import type { Cidr } from "../Domain/Cidr.ts"
import { clientIp } from "../Edge/ClientIp.ts"
import type { RequestContext } from "../Domain/RequestContext.ts"
import { correlationIdFrom, traceIdFrom } from "../Edge/RequestIds.ts"

export const makeCorrelation = (trustedProxies: ReadonlyArray<Cidr>, verifier: TokenVerifier["Service"]) => {
  /** The facts known before anything is checked. */
  const begin = (request: HttpServerRequest.HttpServerRequest): RequestContext => {
    const requestId = randomUUID()
    return {
      requestId,
      correlationId: correlationIdFrom(request.headers["x-correlation-id"]),
      traceId: traceIdFrom(request.headers["traceparent"], requestId),
      startedAt: new Date(),
      ip: clientIp(Option.getOrUndefined(request.remoteAddress), request.headers["x-forwarded-for"], trustedProxies),
      userAgent: request.headers["user-agent"] ?? "",
      auth: undefined,
      user: undefined
    }
  }

  /** The same facts with the request's authentication (the token is verified here, once). */
  const authenticate = (ctx: RequestContext, request: HttpServerRequest.HttpServerRequest): Effect.Effect<RequestContext> =>
    Effect.map(Effect.exit(authenticateHeader(verifier, request.headers["authorization"])), (auth) => ({
      ...ctx,
      auth,
      user: Exit.isSuccess(auth) ? auth.value : undefined
    }))

  return { begin, authenticate } as const
}

/** Every response carries the ids (errors and 429 included: docs/http-api.md#conventions). */
export const idHeaders = (ctx: RequestContext) => ({ "x-correlation-id": ctx.correlationId, "x-request-id": ctx.requestId })
