/**
 * What an upgrade passes before its WebSocket exists (docs/websocket.md#limits), so a flood of upgrades does not
 * cost a socket and a signature check each: the path and method, the service not shutting down,
 * the instance's WS_MAX_CONNECTIONS (handshakes included; 503), and — when RATE_LIMIT_ENABLED —
 * the per-IP upgrade rate (RATE_LIMIT_PER_MINUTE + RATE_LIMIT_BURST per trailing 60 s, in a
 * bucket of its own; 429 with Retry-After and X-RateLimit-*). Refusals are counted in
 * `ws_upgrades_refused_total{reason}` and answered from the error table on the raw socket.
 */
import { Effect } from "effect"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import type { AppConfigShape } from "../Config.ts"
import { clientIp } from "../Edge/ClientIp.ts"
import { correlationIdFrom } from "../Edge/RequestIds.ts"
import { refuseWithError } from "../Edge/Upgrades.ts"
import { MethodNotAllowed, RateLimited, RouteNotFound, ServiceUnavailable, TooManyConnections } from "../Errors.ts"
import { wsUpgradesRefusedTotal } from "../Observability/Metrics.ts"
import { makeAdmission } from "../RateLimit/Admission.ts"
import { type RateLimiter, rateLimitHeaders } from "../RateLimit/RateLimiter.ts"
import { WS_PATH } from "./Protocol.ts"

export const headerText = (value: string | ReadonlyArray<string> | undefined) =>
  typeof value === "string" || value === undefined ? value : value.join(",")

export interface UpgradeGateDeps {
  readonly config: AppConfigShape
  readonly limiter: RateLimiter["Service"]
  /** Sockets held now, and whether the server is shutting down. */
  readonly held: () => number
  readonly shuttingDown: () => boolean
  /** Runs the rate check (the server's fibers). */
  readonly run: (effect: Effect.Effect<void>) => void
  /** Hands an admitted upgrade to the WebSocket server. */
  readonly complete: (request: IncomingMessage, socket: Duplex, head: Buffer, url: URL, correlationId: string, ip: string) => void
}

export const makeUpgradeGate = (deps: UpgradeGateDeps) => {
  const { config } = deps
  /** Upgrades past the checks whose WebSocket does not exist yet (they count toward the cap). */
  let admitting = 0
  const admission = makeAdmission(deps.limiter, {
    limitType: "websocket_upgrade",
    limit: config.rateLimitPerMinute + config.rateLimitBurst,
    failMode: config.rateLimitFailMode
  })

  const ipOf = (request: IncomingMessage) =>
    clientIp(request.socket.remoteAddress, headerText(request.headers["x-forwarded-for"]), config.trustedProxies)

  return (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(request.url ?? "/", "http://localhost")
    // docs/http-api.md#conventions: every answer carries the caller's correlation id (when valid), refusals included.
    const correlationId = correlationIdFrom(headerText(request.headers["x-correlation-id"]))
    if (url.pathname !== WS_PATH) return refuseWithError(socket, RouteNotFound.instance, { correlationId })
    // As the HTTP route answers a wrong method (Http/ErrorResponse.ts), not ws's text/html 405.
    if (request.method !== "GET") return refuseWithError(socket, MethodNotAllowed.of(["GET", "HEAD"]), { correlationId })
    if (deps.shuttingDown()) return refuseWithError(socket, ServiceUnavailable.instance, { correlationId })
    if (deps.held() + admitting >= config.wsMaxConnections) {
      wsUpgradesRefusedTotal.inc({ reason: "capacity" })
      return refuseWithError(socket, TooManyConnections.instance, { correlationId })
    }
    const ip = ipOf(request)
    if (!config.rateLimitEnabled) return deps.complete(request, socket, head, url, correlationId, ip)
    admitting++
    deps.run(
      admission.check(`ws:upgrade:ip:${ip}`).pipe(
        Effect.map((admitted) => {
          if (admitted._tag === "Refused") {
            wsUpgradesRefusedTotal.inc({ reason: "rate_limit" })
            return refuseWithError(socket, RateLimited.instance, { correlationId, headers: rateLimitHeaders(admitted.decision) })
          }
          if (deps.shuttingDown()) return refuseWithError(socket, ServiceUnavailable.instance, { correlationId })
          deps.complete(request, socket, head, url, correlationId, ip)
        }),
        Effect.ensuring(Effect.sync(() => admitting--)),
        Effect.catchCause((cause) => Effect.andThen(Effect.logError("WebSocket upgrade failed", cause), Effect.sync(() => socket.destroy())))
      )
    )
  }
}
