/**
 * What the front door learns about a request (ids, client IP, the authenticated user) and the
 * inner layers read back: a fiber-local value, so no service requirement leaks into handlers.
 */
import { type Exit, FiberRef } from "effect"
import type { Principal } from "../Domain/User.ts"
import type { Unauthenticated } from "../Errors.ts"

export interface RequestContext {
  /** UUID per request: `X-Request-ID` and the audit record's request_id (CONTRACT §6). */
  readonly requestId: string
  readonly correlationId: string
  readonly startedAt: Date
  readonly ip: string
  readonly userAgent: string
  /** Authentication, done at most once per request (the rate limiter keys by it). */
  auth: Exit.Exit<Principal, Unauthenticated> | undefined
  user: Principal | undefined
  /** The route template that served the request (`/authors/{author_id}`), when one matched. */
  route: string | undefined
}

export const currentRequest = FiberRef.unsafeMake<RequestContext | undefined>(undefined)

export const getRequestContext = FiberRef.get(currentRequest)

const CORRELATION_ID = /^[A-Za-z0-9._-]{1,64}$/

/** CONTRACT §3: accepted when 1–64 of `[A-Za-z0-9._-]`, else replaced by 8 generated hex characters. */
export const correlationIdFrom = (header: string | undefined): string =>
  header !== undefined && CORRELATION_ID.test(header) ? header : randomHex8()

const randomHex8 = () => Math.floor(Math.random() * 0x1_0000_0000).toString(16).padStart(8, "0")
