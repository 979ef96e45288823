/**
 * Front door: CORS for browser clients (docs/http-api.md#conventions). `CORS_ALLOWED_ORIGINS` (comma-separated or
 * `*`) answers preflights — here, before the rate limit and authentication, so a browser can ask —
 * and adds `Access-Control-Allow-Origin` for the listed origins, exposing the id and rate-limit
 * headers. Empty (the default) adds nothing. Bearer tokens, not cookies: no credentials mode.
 */
import { HttpServerResponse } from "effect/http"
import type { HttpServerRequest } from "effect/http"

// ETag and If-None-Match: conditional reads made by a script (Authors/Http.ts).
const EXPOSED = "X-Correlation-ID, X-Request-ID, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After, ETag"
const PREFLIGHT = {
  "access-control-allow-methods": "GET, POST, PUT, DELETE, OPTIONS",
  // traceparent / tracestate / b3: a browser client that propagates its trace (Effect's HttpClient
  // sends traceparent and b3 by default) joins the service's trace (Http/Correlation.ts reads traceparent).
  "access-control-allow-headers": "Authorization, Content-Type, X-Correlation-ID, If-None-Match, traceparent, tracestate, b3",
  "access-control-max-age": "600"
}

export interface Cors {
  /** The answer to a preflight from an allowed origin, else undefined (the request goes on). */
  readonly preflight: (request: HttpServerRequest.HttpServerRequest) => HttpServerResponse.HttpServerResponse | undefined
  /** The CORS headers of a response to `request` (none for an origin not listed). */
  readonly headers: (request: HttpServerRequest.HttpServerRequest) => Record<string, string>
}

export const makeCors = (allowed: ReadonlyArray<string>): Cors | undefined => {
  if (allowed.length === 0) return undefined
  const any = allowed.includes("*")
  const origins = new Set(allowed)
  const allowedOrigin = (request: HttpServerRequest.HttpServerRequest) => {
    const origin = request.headers["origin"]
    return origin !== undefined && (any || origins.has(origin)) ? origin : undefined
  }
  const headers = (request: HttpServerRequest.HttpServerRequest): Record<string, string> => {
    const origin = allowedOrigin(request)
    return origin === undefined
      ? {}
      : { "access-control-allow-origin": origin, "access-control-expose-headers": EXPOSED, vary: "Origin" }
  }
  return {
    headers,
    preflight: (request) =>
      request.method === "OPTIONS" && request.headers["access-control-request-method"] !== undefined &&
        allowedOrigin(request) !== undefined
        ? HttpServerResponse.empty({ status: 204, headers: { ...PREFLIGHT, ...headers(request) } })
        : undefined
  }
}
