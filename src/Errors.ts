/**
 * Every error a client can see, and the one table that maps each to its HTTP status and
 * WebSocket status_code (docs/errors-and-limits.md#http-errors, docs/websocket.md#status-codes). The wire body of every HTTP error is `{detail}`.
 */
import { Schema, SchemaTransformation } from "effect"

const fields = { detail: Schema.String }

export class AuthorNotFound extends Schema.TaggedError<AuthorNotFound>()("AuthorNotFound", fields) {
  static readonly of = (id: number) => new AuthorNotFound({ detail: `Author with ID ${id} not found` })
}
export class AuthorNameTaken extends Schema.TaggedError<AuthorNameTaken>()("AuthorNameTaken", fields) {
  static readonly of = (name: string) => new AuthorNameTaken({ detail: `Author with name ${name} already exists` })
}
export class Unauthenticated extends Schema.TaggedError<Unauthenticated>()("Unauthenticated", fields) {
  static readonly missing = new Unauthenticated({ detail: "Not authenticated" })
  static readonly invalid = new Unauthenticated({ detail: "Could not validate credentials" })
}
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", fields) {
  static readonly instance = new Forbidden({ detail: "Forbidden" })
}
export class InvalidCredentials extends Schema.TaggedError<InvalidCredentials>()("InvalidCredentials", fields) {
  static readonly instance = new InvalidCredentials({ detail: "Invalid credentials" })
}
export class InvalidRefreshToken extends Schema.TaggedError<InvalidRefreshToken>()("InvalidRefreshToken", fields) {
  static readonly instance = new InvalidRefreshToken({ detail: "Invalid refresh token" })
}
export class IdentityProviderUnavailable
  extends Schema.TaggedError<IdentityProviderUnavailable>()("IdentityProviderUnavailable", fields)
{
  static readonly instance = new IdentityProviderUnavailable({ detail: "Identity provider unavailable" })
}
export class AuditLogNotFound extends Schema.TaggedError<AuditLogNotFound>()("AuditLogNotFound", fields) {
  static readonly instance = new AuditLogNotFound({ detail: "Audit log not found" })
}
export class InvalidFilename extends Schema.TaggedError<InvalidFilename>()("InvalidFilename", fields) {
  static readonly instance = new InvalidFilename({ detail: "Invalid filename" })
}
export class ReportNotFound extends Schema.TaggedError<ReportNotFound>()("ReportNotFound", fields) {
  static readonly of = (filename: string) => new ReportNotFound({ detail: `Report ${filename} not found` })
}
/** `POST /api/profiling/reports` refused (docs/operations.md#profiling). */
export class CaptureRefused extends Schema.TaggedError<CaptureRefused>()("CaptureRefused", fields) {
  static readonly disabled = new CaptureRefused({ detail: "Profiling is disabled" })
  static readonly running = new CaptureRefused({ detail: "A capture is already running" })
}
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", fields) {
  static readonly instance = new RateLimited({ detail: "Rate limit exceeded" })
}
/**
 * Failed-login slowing refused the attempt (docs/errors-and-limits.md#failed-logins, Auth/LoginThrottle.ts); the login handler
 * answers it with `Retry-After: retryAfterSeconds`, which the `{detail}` body does not carry.
 */
export class TooManyFailedLogins extends Schema.TaggedError<TooManyFailedLogins>()("TooManyFailedLogins", {
  ...fields,
  retryAfterSeconds: Schema.Number
}) {
  static readonly DETAIL = "Too many failed login attempts"
  static readonly of = (retryAfterSeconds: number) =>
    new TooManyFailedLogins({ detail: TooManyFailedLogins.DETAIL, retryAfterSeconds })
}
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", fields) {
  static readonly instance = new PayloadTooLarge({ detail: "Request body too large" })
}
export class RouteNotFound extends Schema.TaggedError<RouteNotFound>()("RouteNotFound", fields) {
  static readonly instance = new RouteNotFound({ detail: "Not Found" })
}
/**
 * A known path asked with a method it does not serve; `allow` is what the `Allow` header lists
 * (Http/ErrorResponse.ts answers it, the body being `{detail}` only). Not in OpenAPI, as FastAPI
 * documents no 405 either.
 */
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", {
  ...fields,
  allow: Schema.Array(Schema.String)
}) {
  static readonly DETAIL = "Method Not Allowed"
  static readonly of = (allow: ReadonlyArray<string>) => new MethodNotAllowed({ detail: MethodNotAllowed.DETAIL, allow })
}
/** What Node's HTTP parser refused, or a request framed so it cannot be trusted (Http/Http1.ts). */
export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", fields) {
  static readonly instance = new BadRequest({ detail: "Bad request" })
}
export class RequestHeaderFieldsTooLarge extends Schema.TaggedError<RequestHeaderFieldsTooLarge>()("RequestHeaderFieldsTooLarge", fields) {
  static readonly instance = new RequestHeaderFieldsTooLarge({ detail: "Request header fields too large" })
}
export class RequestTimeout extends Schema.TaggedError<RequestTimeout>()("RequestTimeout", fields) {
  static readonly instance = new RequestTimeout({ detail: "Request timeout" })
}
/** The port is open but the service is not ready yet: every request but the probes (Http/NodeServer.ts). */
export class ServiceStarting extends Schema.TaggedError<ServiceStarting>()("ServiceStarting", fields) {
  static readonly instance = new ServiceStarting({ detail: "Service starting" })
}
/** The service is shutting down: a request or a WebSocket upgrade is refused. */
export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()("ServiceUnavailable", fields) {
  static readonly instance = new ServiceUnavailable({ detail: "Service unavailable" })
}
/** WS_MAX_CONNECTIONS reached: an upgrade is refused before any token check. */
export class TooManyConnections extends Schema.TaggedError<TooManyConnections>()("TooManyConnections", fields) {
  static readonly instance = new TooManyConnections({ detail: "Too many connections" })
  /** When a client may try again (`Retry-After`). */
  static readonly RETRY_AFTER_SECONDS = 5
}
export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", fields) {
  static readonly instance = new InternalError({ detail: "Internal server error" })
}

export type ClientError =
  | AuthorNotFound
  | AuthorNameTaken
  | Unauthenticated
  | Forbidden
  | InvalidCredentials
  | InvalidRefreshToken
  | IdentityProviderUnavailable
  | AuditLogNotFound
  | InvalidFilename
  | ReportNotFound
  | CaptureRefused
  | RateLimited
  | TooManyFailedLogins
  | PayloadTooLarge
  | RouteNotFound
  | MethodNotAllowed
  | BadRequest
  | RequestHeaderFieldsTooLarge
  | RequestTimeout
  | ServiceStarting
  | ServiceUnavailable
  | TooManyConnections
  | InternalError

/** WebSocket status codes (docs/websocket.md#status-codes). */
export const WsStatus = { OK: 0, ERROR: 1, INVALID_DATA: 2, PERMISSION_DENIED: 3 } as const
export type WsStatus = (typeof WsStatus)[keyof typeof WsStatus]

/** The table: tag → HTTP status and WebSocket status_code. */
export const errorStatus: { readonly [K in ClientError["_tag"]]: { readonly http: number; readonly ws: WsStatus } } = {
  AuthorNotFound: { http: 404, ws: WsStatus.INVALID_DATA },
  AuthorNameTaken: { http: 409, ws: WsStatus.INVALID_DATA },
  Unauthenticated: { http: 401, ws: WsStatus.PERMISSION_DENIED },
  Forbidden: { http: 403, ws: WsStatus.PERMISSION_DENIED },
  InvalidCredentials: { http: 401, ws: WsStatus.PERMISSION_DENIED },
  InvalidRefreshToken: { http: 401, ws: WsStatus.PERMISSION_DENIED },
  IdentityProviderUnavailable: { http: 503, ws: WsStatus.ERROR },
  AuditLogNotFound: { http: 404, ws: WsStatus.INVALID_DATA },
  InvalidFilename: { http: 400, ws: WsStatus.INVALID_DATA },
  ReportNotFound: { http: 404, ws: WsStatus.INVALID_DATA },
  CaptureRefused: { http: 409, ws: WsStatus.ERROR },
  RateLimited: { http: 429, ws: WsStatus.ERROR },
  TooManyFailedLogins: { http: 429, ws: WsStatus.ERROR },
  PayloadTooLarge: { http: 413, ws: WsStatus.INVALID_DATA },
  RouteNotFound: { http: 404, ws: WsStatus.INVALID_DATA },
  MethodNotAllowed: { http: 405, ws: WsStatus.INVALID_DATA },
  BadRequest: { http: 400, ws: WsStatus.INVALID_DATA },
  RequestHeaderFieldsTooLarge: { http: 431, ws: WsStatus.INVALID_DATA },
  RequestTimeout: { http: 408, ws: WsStatus.ERROR },
  ServiceStarting: { http: 503, ws: WsStatus.ERROR },
  ServiceUnavailable: { http: 503, ws: WsStatus.ERROR },
  TooManyConnections: { http: 503, ws: WsStatus.ERROR },
  InternalError: { http: 500, ws: WsStatus.ERROR }
}

/**
 * The headers an error's HTTP answer carries besides its `{detail}` body: a 405's `Allow`, a
 * refused login's and a full instance's `Retry-After`. Answers built on a socket (Edge/Upgrades.ts)
 * and through HttpApi (Http/ErrorResponse.ts) both take them from here.
 */
export const errorHeaders = (error: ClientError): Readonly<Record<string, string>> => {
  switch (error._tag) {
    case "MethodNotAllowed":
      return { allow: error.allow.join(", ") }
    case "TooManyFailedLogins":
      return { "retry-after": String(error.retryAfterSeconds) }
    case "TooManyConnections":
      return { "retry-after": String(TooManyConnections.RETRY_AFTER_SECONDS) }
    default:
      return {}
  }
}

/**
 * The wire schema of an error: exactly `{detail}` (the class's own schema would also put `_tag`
 * on the wire), annotated with its status for HttpApi (`httpApiStatus`) and OpenAPI. Its Type is
 * the error instance, so a handler fails with `new AuthorNotFound(...)` and HttpApi picks this
 * member of the endpoint's error union by `instanceof`. `decode` is what a client makes of a body.
 */
const wireWith = <C extends abstract new(...args: never) => ClientError>(
  cls: C,
  tag: InstanceType<C>["_tag"],
  options: {
    readonly decode: (body: { readonly detail: string }) => InstanceType<C>
    /** The response's description in OpenAPI; `<tag>Error` by default. */
    readonly description?: string
  }
) =>
  Schema.Struct({ detail: Schema.String }).annotate({ identifier: `${tag}Error` }).pipe(
    Schema.decodeTo(
      Schema.instanceOf(cls),
      SchemaTransformation.transform<InstanceType<C>, { readonly detail: string }>({
        decode: options.decode,
        encode: (error) => ({ detail: error.detail })
      })
    )
  ).annotate({ httpApiStatus: errorStatus[tag].http, description: options.description ?? `${tag}Error` })

/** The wire schema of an error that is all `detail` (every error but TooManyFailedLogins). */
const wire = <C extends new(props: { readonly detail: string }) => ClientError>(cls: C, tag: InstanceType<C>["_tag"]) =>
  wireWith(cls, tag, { decode: (body) => new cls({ detail: body.detail }) as InstanceType<C> })

export const Wire = {
  AuthorNotFound: wire(AuthorNotFound, "AuthorNotFound"),
  AuthorNameTaken: wire(AuthorNameTaken, "AuthorNameTaken"),
  Unauthenticated: wire(Unauthenticated, "Unauthenticated"),
  Forbidden: wire(Forbidden, "Forbidden"),
  InvalidCredentials: wire(InvalidCredentials, "InvalidCredentials"),
  InvalidRefreshToken: wire(InvalidRefreshToken, "InvalidRefreshToken"),
  IdentityProviderUnavailable: wire(IdentityProviderUnavailable, "IdentityProviderUnavailable"),
  AuditLogNotFound: wire(AuditLogNotFound, "AuditLogNotFound"),
  InvalidFilename: wire(InvalidFilename, "InvalidFilename"),
  ReportNotFound: wire(ReportNotFound, "ReportNotFound"),
  CaptureRefused: wire(CaptureRefused, "CaptureRefused"),
  RateLimited: wire(RateLimited, "RateLimited"),
  // The client's retry delay is in the response's Retry-After header, not in the body.
  TooManyFailedLogins: wireWith(TooManyFailedLogins, "TooManyFailedLogins", {
    decode: (body) => new TooManyFailedLogins({ detail: body.detail, retryAfterSeconds: 1 }),
    description: "Too many failed login attempts for this username (see Retry-After)"
  }),
  PayloadTooLarge: wire(PayloadTooLarge, "PayloadTooLarge"),
  InternalError: wire(InternalError, "InternalError")
} as const

export const isClientError = (u: unknown): u is ClientError =>
  typeof u === "object" && u !== null && "_tag" in u && typeof u._tag === "string" && u._tag in errorStatus &&
  "detail" in u
