/**
 * What the front door learns about a request — ids, trace id, client IP, the authentication —
 * as ONE immutable value in the request's context. RBAC, the rate limiter, the logger, the metrics
 * and the audit record all read this value; nobody writes to it after the front door built it, so
 * no service requirement and no shared mutable state leak into handlers.
 */
import { Context, Effect, type Exit } from "effect"
import type { Observed } from "../Authors/ReadCache.ts"
import type { Principal } from "../Domain/User.ts"
import type { Unauthenticated } from "../Errors.ts"

export interface RequestContext {
  /** UUID per request: `X-Request-ID` and the audit record's request_id (CONTRACT §6). */
  readonly requestId: string
  readonly correlationId: string
  /**
   * The trace id log lines carry when no span is open (tracing off, CONTRACT §8): the caller's,
   * from a valid W3C `traceparent`, else the request id's 32 hex digits.
   */
  readonly traceId: string
  readonly startedAt: Date
  readonly ip: string
  readonly userAgent: string
  /**
   * Authentication, done once per request by the front door, before the app runs, whenever
   * anything will ask for it (the rate limiter keys by it; a secured endpoint needs it).
   * `undefined`: nothing asked, the request was not authenticated.
   */
  readonly auth: Exit.Exit<Principal, Unauthenticated> | undefined
  /** The authenticated principal (`auth` succeeded). */
  readonly user: Principal | undefined
  /**
   * The read cache's generation the rate check read for this request (an author read, with Redis):
   * it came in the same round trip (Authors/ReadCache.ts). Undefined when none was asked or read.
   */
  readonly observed?: Observed | undefined
}

/** The current request's facts; `undefined` outside an HTTP request. */
export const currentRequest = Context.Reference<RequestContext | undefined>("Edge/RequestContext", {
  defaultValue: () => undefined
})

export const getRequestContext: Effect.Effect<RequestContext | undefined> = Effect.service(currentRequest)

const CORRELATION_ID = /^[A-Za-z0-9._-]{1,64}$/

/** CONTRACT §3: accepted when 1–64 of `[A-Za-z0-9._-]`, else replaced by 8 generated hex characters. */
export const correlationIdFrom = (header: string | undefined): string =>
  header !== undefined && CORRELATION_ID.test(header) ? header : randomHex8()

const randomHex8 = () => Math.floor(Math.random() * 0x1_0000_0000).toString(16).padStart(8, "0")

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/
const ZERO_TRACE_ID = "0".repeat(32)

/** The trace id of a W3C `traceparent` header (not the all-zero one), else the request id's hex digits. */
export const traceIdFrom = (traceparent: string | undefined, requestId: string): string => {
  const id = traceparent === undefined ? undefined : TRACEPARENT.exec(traceparent)?.[1]
  return id !== undefined && id !== ZERO_TRACE_ID ? id : requestId.replaceAll("-", "")
}
