/**
 * The ids a request or a WebSocket upgrade brings in its headers: the correlation id and the W3C
 * trace id. Both transports read them the same way; the request's facts they end up in are
 * Domain/RequestContext.ts.
 */

const CORRELATION_ID = /^[A-Za-z0-9._-]{1,64}$/

/** docs/http-api.md#conventions: accepted when 1–64 of `[A-Za-z0-9._-]`, else replaced by 8 generated hex characters. */
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
