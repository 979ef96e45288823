/**
 * What the front door learns about a request — ids, trace id, client IP, the authentication —
 * as ONE immutable value in the request's context. RBAC, the rate limiter, the logger, the metrics
 * and the audit record all read this value; nobody writes to it after the front door built it, so
 * no service requirement and no shared mutable state leak into handlers. A plain value shape, so
 * services read it without depending on the transports; the headers it is built from are parsed
 * in Edge/RequestIds.ts.
 */
import { Context, Effect, type Exit } from "effect"
import type { Unauthenticated } from "../Errors.ts"
import type { Principal } from "./User.ts"

/**
 * A read-cache generation a rate check reads (Authors/ReadCache.ts), by its key without
 * REDIS_KEY_PREFIX: a counter (an id's shard), or a record of counters read as one value (the
 * list's: Store/RedisLua.ts `clockRecordLua`).
 */
export interface GenerationKey {
  readonly key: string
  readonly record: boolean
}

/** A generation value a request's rate check read, and under which key (Authors/ReadCache.ts). */
export interface Observed {
  readonly key: string
  readonly value: string
}

export interface RequestContext {
  /** UUID per request: `X-Request-ID` and the audit record's request_id (docs/audit.md#what-is-recorded). */
  readonly requestId: string
  readonly correlationId: string
  /**
   * The trace id log lines carry when no span is open (tracing off, docs/operations.md#tracing): the caller's,
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
export const currentRequest = Context.Reference<RequestContext | undefined>("Domain/RequestContext", {
  defaultValue: () => undefined
})

export const getRequestContext: Effect.Effect<RequestContext | undefined> = Effect.service(currentRequest)
