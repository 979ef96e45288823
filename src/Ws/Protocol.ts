/**
 * The `/web` package protocol (docs/websocket.md): envelopes, status
 * codes, close codes and the framing rules that decide between a `status_code 2` answer and a
 * 1003 close. These schemas are what the server checks and what `/asyncapi.json` publishes.
 * One module on purpose (~310 lines): the protocol's whole vocabulary, read by the server, the
 * AsyncAPI document and the tests, in the one place a client developer looks.
 */
import { Result, Schema, SchemaAST, SchemaIssue } from "effect"
import { Author } from "../Domain/Author.ts"
import { PageMeta } from "../Domain/Pagination.ts"
import { WsStatus } from "../Errors.ts"
import { depthExceeds, MAX_JSON_DEPTH, tooDeepMessage } from "../Domain/JsonDepth.ts"
import { annotatedMessage, issue, meant, splitIssue } from "../Domain/Params.ts"

/** The endpoint's path on the HTTP port. */
export const WS_PATH = "/web"

/** A broadcast answers no request: its req_id is all zeros (docs/websocket.md#broadcasts). */
export const BROADCAST_REQ_ID = "00000000-0000-0000-0000-000000000000"

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/

export const Uuid = Schema.String.check(Schema.isPattern(UUID, {
  expected: "a UUID",
  toJsonSchema: () => ({ pattern: UUID.source, format: "uuid" })
}))

/** `data_json` of a protobuf frame that is not JSON: reported under `data` like any other bad `data`. */
export class InvalidJson {
  readonly text: string
  constructor(text: string) {
    this.text = text
  }
}

const Data = Schema.Record(Schema.String, Schema.Unknown).annotate({
  message: issue("dict_type", "Input should be a valid dictionary")
})

/** `method` and `data` may be absent or null: then "" and `{}` (`checkEnvelope`). */
export const RequestEnvelope = Schema.Struct({
  pkg_id: Schema.Int,
  req_id: Uuid,
  method: Schema.optional(
    Schema.NullOr(Schema.String.annotate({ message: issue("string_type", "Input should be a valid string") }))
  ).annotateKey({ default: "" }),
  data: Schema.optional(Schema.NullOr(Data)).annotateKey({ default: {} })
}).annotate({ identifier: "RequestEnvelope", description: "Every client message (JSON text frame, or a protobuf Request)." })

export const ResponseEnvelope = Schema.Struct({
  pkg_id: Schema.Int,
  req_id: Uuid,
  status_code: Schema.Literals([0, 1, 2, 3]),
  data: Schema.Unknown,
  meta: Schema.NullOr(PageMeta)
}).annotate({ identifier: "ResponseEnvelope" })

export const BroadcastEvents = ["author.created", "author.updated", "author.deleted"] as const

const ISO_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z$/

/**
 * A broadcast's `data`. Also what an instance accepts from the Redis broadcast channel, where
 * anyone with access to Redis may publish: what does not decode is dropped, not forwarded.
 */
export const BroadcastData = Schema.Struct({
  event: Schema.Literals(BroadcastEvents),
  timestamp: Schema.String.check(Schema.isPattern(ISO_TIMESTAMP, { expected: "an ISO 8601 UTC timestamp" })).annotate({
    description: "ISO 8601, when the change was announced"
  }),
  author: Author
})

export const BroadcastFrame = Schema.Struct({
  pkg_id: Schema.Literal(0),
  req_id: Schema.Literal(BROADCAST_REQ_ID),
  data: BroadcastData
}).annotate({ identifier: "Broadcast" })

export const AuthFrame = Schema.Struct({
  type: Schema.Literal("auth"),
  token: Schema.String.annotate({ description: "`Bearer <jwt>` or the bare JWT" })
}).annotate({ identifier: "AuthFrame" })

export const AuthOk = Schema.Struct({ type: Schema.Literal("auth_ok") }).annotate({ identifier: "AuthOk" })
export const AUTH_OK_TEXT = JSON.stringify({ type: "auth_ok" })

export interface CloseCode {
  readonly code: number
  readonly reason: string
  readonly when: string
}

/** Every close the server initiates (docs/websocket.md#close-codes). */
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
  PingFlood: {
    code: 1008,
    reason: "Policy violation",
    when: "pings keep coming while the client does not read the pongs: what waits to be sent to it passed half the send bound (2 MiB)"
  },
  TooBig: { code: 1009, reason: "", when: "a frame larger than WS_MAX_MESSAGE_BYTES" },
  InternalError: {
    code: 1011,
    reason: "Internal error",
    when: "an answer sent in fragments (package 1) failed part-way (the database failed after its first batches): the client discards the fragments it holds"
  },
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

/** The HTTP equivalent of a status_code (docs/websocket.md#status-codes), for audit records. */
export const httpEquivalent: Readonly<Record<WsStatus, number>> = { 0: 200, 1: 500, 2: 400, 3: 403 }

export interface ErrorItem {
  readonly loc: ReadonlyArray<string | number>
  readonly msg: string
  readonly type: string
}

/** An `errors` item from its message: the `type|message` convention of Domain/Params.ts, else `value_error`. */
const fromMessage = (loc: ReadonlyArray<string | number>, message: string): ErrorItem => {
  const split = splitIssue(message)
  return split === undefined ? { loc, msg: message, type: "value_error" } : { loc, msg: split.msg, type: split.type }
}

/** A value of the wrong type, named as FastAPI names it (`errors`: docs/websocket.md#status-codes). */
const wrongType = (loc: ReadonlyArray<string | number>, ast: SchemaAST.AST, fallback: string): ErrorItem => {
  const message = annotatedMessage(ast.annotations)
  if (message !== undefined) return fromMessage(loc, message)
  const target = meant(ast)
  const own = target === ast ? undefined : annotatedMessage(target.annotations)
  if (own !== undefined) return fromMessage(loc, own)
  switch (target._tag) {
    case "String":
      return { loc, msg: "Input should be a valid string", type: "string_type" }
    case "Number":
      return { loc, msg: "Input should be a valid integer", type: "int_type" }
    case "Objects":
      return { loc, msg: "Input should be a valid dictionary", type: "dict_type" }
    default:
      return { loc, msg: fallback, type: "value_error" }
  }
}

const isIntFilter = (filter: SchemaAST.Filter<unknown>) => {
  const representation = filter.annotations?.["representation"]
  return typeof representation === "object" && representation !== null && "id" in representation &&
    representation.id === "effect/schema/isInt"
}

/**
 * Walks an issue tree to its leaves. `override` is the message of an enclosing filter (it names
 * every failure below it); `fallback` is what an enclosing filter expects, used when nothing
 * below carries a message of its own (a filter returning `issue(type, message)`).
 */
const collect = (
  issue: SchemaIssue.Issue,
  loc: ReadonlyArray<string | number>,
  out: Array<ErrorItem>,
  override: string | undefined,
  fallback: string | undefined
): void => {
  switch (issue._tag) {
    case "Pointer":
      return collect(issue.issue, [...loc, ...issue.path.map((p) => (typeof p === "number" ? p : String(p)))], out, override, fallback)
    case "Encoding":
      return collect(issue.issue, loc, out, override, fallback)
    case "Filter": {
      const message = override ?? annotatedMessage(issue.filter.annotations)
      if (message !== undefined) return collect(issue.issue, loc, out, message, undefined)
      if (isIntFilter(issue.filter)) {
        out.push({ loc, msg: "Input should be a valid integer", type: "int_type" })
        return
      }
      const expected = issue.filter.annotations?.expected
      return collect(issue.issue, loc, out, undefined, typeof expected === "string" ? `Expected ${expected}` : fallback)
    }
    case "Composite":
      for (const inner of issue.issues) collect(inner, loc, out, override, fallback)
      return
    case "AnyOf":
      if (issue.issues.length > 0) {
        for (const inner of issue.issues) collect(inner, loc, out, override, fallback)
        return
      }
      out.push(override !== undefined ? fromMessage(loc, override) : wrongType(loc, issue.ast, format(issue)))
      return
    case "MissingKey":
      out.push({ loc, msg: "Field required", type: "missing" })
      return
    case "UnexpectedKey":
      out.push({ loc, msg: "Extra inputs are not permitted", type: "extra_forbidden" })
      return
    case "InvalidType":
      out.push(override !== undefined ? fromMessage(loc, override) : wrongType(loc, issue.ast, format(issue)))
      return
    case "InvalidValue":
    case "Forbidden":
    case "OneOf": {
      const annotations = issue._tag === "OneOf" ? issue.ast.annotations : issue.annotations
      out.push(fromMessage(loc, override ?? annotatedMessage(annotations) ?? fallback ?? format(issue)))
      return
    }
  }
}

const format = SchemaIssue.makeFormatterDefault()

/** A schema failure as `errors` items, `loc` from the envelope's root (`["data", "page"]`). */
export const errorItems = (issue: SchemaIssue.Issue, prefix: ReadonlyArray<string>): ReadonlyArray<ErrorItem> => {
  const out: Array<ErrorItem> = []
  collect(issue, prefix, out, undefined, undefined)
  return out
}

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

const decodeEnvelope = Schema.decodeUnknownResult(RequestEnvelope, { errors: "all" })

export interface Envelope {
  readonly data: Readonly<Record<string, unknown>>
}

/** The `data` of a request frame (`method` is validated, not used), or the `errors` of `status_code 2` (docs/websocket.md#status-codes). */
export const checkEnvelope = (fields: Readonly<Record<string, unknown>>): Result.Result<Envelope, ReadonlyArray<ErrorItem>> => {
  if (fields["data"] instanceof InvalidJson) {
    return Result.fail([{ loc: ["data"], msg: "data_json is not valid JSON", type: "json_invalid" }])
  }
  if (depthExceeds(fields, MAX_JSON_DEPTH + 1)) return Result.fail([{ loc: [], msg: tooDeepMessage, type: "value_error" }])
  const decoded = decodeEnvelope(fields)
  return Result.isFailure(decoded)
    ? Result.fail(errorItems(decoded.failure.issue, []))
    : Result.succeed({ data: decoded.success.data ?? {} })
}
