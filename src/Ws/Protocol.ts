/**
 * The `/web` package protocol (INTERFACE §WebSocket endpoint, CONTRACT §5, §9): envelopes, status
 * codes, close codes and the framing rules that decide between a `status_code 2` answer and a
 * 1003 close. These schemas are what the server checks and what `/asyncapi.json` publishes.
 */
import { Either, ParseResult, Schema } from "effect"
import { Author, PageMeta } from "../Domain/Author.ts"
import { WsStatus } from "../Errors.ts"
import { depthExceeds, MAX_JSON_DEPTH, tooDeepMessage } from "../Http/JsonDepth.ts"
import { issue } from "../Http/Params.ts"
import { describeIssue } from "../Http/Validation.ts"

/** A broadcast answers no request: its req_id is all zeros (INTERFACE §Events). */
export const BROADCAST_REQ_ID = "00000000-0000-0000-0000-000000000000"

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/

export const Uuid = Schema.String.pipe(Schema.pattern(UUID)).annotations({ format: "uuid" })

/** `data_json` of a protobuf frame that is not JSON: reported under `data` like any other bad `data`. */
export class InvalidJson {
  readonly text: string
  constructor(text: string) {
    this.text = text
  }
}

const Data = Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
  message: () => issue("dict_type", "Input should be a valid dictionary")
})

export const RequestEnvelope = Schema.Struct({
  pkg_id: Schema.Int,
  req_id: Uuid,
  method: Schema.optionalWith(Schema.String.annotations({ message: () => issue("string_type", "Input should be a valid string") }), {
    default: () => "",
    nullable: true
  }),
  data: Schema.optionalWith(Data, { default: () => ({}), nullable: true })
}).annotations({ identifier: "RequestEnvelope", description: "Every client message (JSON text frame, or a protobuf Request)." })

export const ResponseEnvelope = Schema.Struct({
  pkg_id: Schema.Int,
  req_id: Uuid,
  status_code: Schema.Literal(0, 1, 2, 3),
  data: Schema.Unknown,
  meta: Schema.NullOr(PageMeta)
}).annotations({ identifier: "ResponseEnvelope" })

export const BroadcastEvents = ["author.created", "author.updated", "author.deleted"] as const

export const BroadcastFrame = Schema.Struct({
  pkg_id: Schema.Literal(0),
  req_id: Schema.Literal(BROADCAST_REQ_ID),
  data: Schema.Struct({
    event: Schema.Literal(...BroadcastEvents),
    timestamp: Schema.String.annotations({ description: "ISO 8601, when the change was announced" }),
    author: Author
  })
}).annotations({ identifier: "Broadcast" })

export const AuthFrame = Schema.Struct({
  type: Schema.Literal("auth"),
  token: Schema.String.annotations({ description: "`Bearer <jwt>` or the bare JWT" })
}).annotations({ identifier: "AuthFrame" })

export const AuthOk = Schema.Struct({ type: Schema.Literal("auth_ok") }).annotations({ identifier: "AuthOk" })
export const AUTH_OK_TEXT = JSON.stringify({ type: "auth_ok" })

export interface CloseCode {
  readonly code: number
  readonly reason: string
  readonly when: string
}

/** Every close the server initiates (CONTRACT §5, §9). */
export const Close = {
  ShuttingDown: { code: 1001, reason: "Server shutting down", when: "the instance is stopping (SIGTERM)" },
  InvalidFormat: {
    code: 1003,
    reason: "Invalid message format",
    when: "a frame that is not a JSON object with an integer pkg_id and a UUID req_id, a binary frame in json format, an undecodable protobuf frame"
  },
  UnsupportedFormat: { code: 1003, reason: "Unsupported format", when: "`format` is neither json nor protobuf" },
  OriginNotAllowed: { code: 1008, reason: "Origin not allowed", when: "the Origin header is not in ALLOWED_WS_ORIGINS" },
  TooManyConnections: {
    code: 1008,
    reason: "Maximum concurrent connections exceeded",
    when: "the user already holds WS_MAX_CONNECTIONS_PER_USER connections (all instances)"
  },
  MessageRateLimit: {
    code: 1008,
    reason: "Message rate limit exceeded",
    when: "WS_MESSAGE_RATE_LIMIT messages were refused for rate in the trailing 60 s"
  },
  TooBig: { code: 1009, reason: "", when: "a frame larger than WS_MAX_MESSAGE_BYTES" },
  TryAgainLater: {
    code: 1013,
    reason: "Try again later",
    when: "the connection registry's store is unreachable and RATE_LIMIT_FAIL_MODE=closed"
  },
  InvalidToken: { code: 4001, reason: "Invalid or expired token", when: "the token is missing a valid signature, expired, or of the wrong issuer/audience" },
  AuthenticationRequired: {
    code: 4001,
    reason: "Authentication required",
    when: "no token in the query and the first frame is not an auth frame"
  },
  SessionExpired: { code: 4001, reason: "Session expired", when: "the token's exp (+ grace) passed without a re-auth frame" },
  SubjectMismatch: { code: 4001, reason: "Token subject mismatch", when: "a re-auth frame carries another user's token" },
  AuthTimeout: { code: 4002, reason: "Authentication timeout", when: "no auth frame within WS_AUTH_TIMEOUT_SECONDS" }
} as const satisfies Record<string, CloseCode>

export const StatusCodes = [
  { code: WsStatus.OK, name: "OK", meaning: "success" },
  { code: WsStatus.ERROR, name: "ERROR", meaning: "general error, database error, message rate limit (data.retry_after)" },
  { code: WsStatus.INVALID_DATA, name: "INVALID_DATA", meaning: "schema failure (data.errors), unknown pkg_id, name conflict" },
  { code: WsStatus.PERMISSION_DENIED, name: "PERMISSION_DENIED", meaning: "the caller lacks a required role" }
] as const

/** The HTTP equivalent of a status_code (INTERFACE §WebSocket status_code), for audit records. */
export const httpEquivalent: Readonly<Record<WsStatus, number>> = { 0: 200, 1: 500, 2: 400, 3: 403 }

export interface ErrorItem {
  readonly loc: ReadonlyArray<string | number>
  readonly msg: string
  readonly type: string
}

/** A schema failure as `errors` items, `loc` from the envelope's root (`["data", "page"]`). */
export const errorItems = (error: ParseResult.ParseError, prefix: ReadonlyArray<string>): ReadonlyArray<ErrorItem> =>
  ParseResult.ArrayFormatter.formatErrorSync(error)
    // `optional`/`nullable` alternatives that did not match anyway: noise for a client.
    .filter((issue) => !/^Expected (undefined|null),/.test(issue.message))
    .map((issue) => {
      const { msg, type } = describeIssue(issue, "data")
      const loc = [...prefix, ...issue.path.map((p) => (typeof p === "number" ? p : String(p)))]
      return issue._tag === "Missing" ? { loc, msg: "Field required", type: "missing" } : { loc, msg, type }
    })

// ---------------------------------------------------------------------------------------------
// Framing

/** What a client frame turned out to be, before any package logic. */
export type Frame =
  | { readonly _tag: "Auth"; readonly token: unknown }
  | {
    readonly _tag: "Request"
    readonly pkgId: number
    readonly reqId: string
    /** The envelope's other fields as received; checked against `RequestEnvelope`. */
    readonly fields: Readonly<Record<string, unknown>>
  }
  | { readonly _tag: "Invalid" }

const INVALID: Frame = { _tag: "Invalid" }

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

export const isUuid = (u: unknown): u is string => typeof u === "string" && UUID.test(u)

/** `pkg_id` must be an integer and `req_id` a UUID, or the frame is unusable (close 1003). */
export const classify = (value: unknown): Frame => {
  if (!isRecord(value)) return INVALID
  if (value["type"] === "auth") return { _tag: "Auth", token: value["token"] }
  const pkgId = value["pkg_id"]
  const reqId = value["req_id"]
  if (typeof pkgId !== "number" || !Number.isSafeInteger(pkgId) || !isUuid(reqId)) return INVALID
  return { _tag: "Request", pkgId, reqId, fields: value }
}

/** A JSON text frame. */
export const parseJsonFrame = (text: string): Frame => {
  try {
    return classify(JSON.parse(text))
  } catch {
    return INVALID
  }
}

const decodeEnvelope = Schema.decodeUnknownEither(RequestEnvelope, { errors: "all" })

export interface Envelope {
  readonly method: string
  readonly data: Readonly<Record<string, unknown>>
}

/** `method` and `data` of a request frame, or the `errors` of CONTRACT §5 for `status_code 2`. */
export const checkEnvelope = (fields: Readonly<Record<string, unknown>>): Either.Either<Envelope, ReadonlyArray<ErrorItem>> =>
  fields["data"] instanceof InvalidJson
    ? Either.left([{ loc: ["data"], msg: "data_json is not valid JSON", type: "json_invalid" }])
    : depthExceeds(fields, MAX_JSON_DEPTH + 1)
    ? Either.left([{ loc: [], msg: tooDeepMessage, type: "value_error" }])
    : Either.mapLeft(decodeEnvelope(fields), (error) => errorItems(error, []))
