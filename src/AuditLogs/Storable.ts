/**
 * An audit record as the database will take it (a record the database refuses never stops the
 * trail: docs/audit.md#guarantees). Every field can come from a client — a 3 KB username on a failed login, a
 * 3,000-character path, NUL bytes, lone surrogates — and PostgreSQL refuses some of them: text
 * cannot hold NUL, jsonb refuses `\u0000` and unpaired surrogates, and a btree index entry must
 * stay under ~2.7 KB. So text is reduced here, once, at the last step before the INSERT (which
 * also covers records read back from the Redis Stream): unstorable characters become U+FFFD and
 * oversized text is cut on a code-point boundary, ending with "…".
 */
import type { AuditEntry, StoredEntry } from "./Entry.ts"
import { requestDataJson } from "./RequestData.ts"

/** Columns with an index (user_id, username, action_type, resource): well under btree's 2704-byte entry. */
export const INDEXED_TEXT_MAX_BYTES = 1024
/** Other free text (user agent, error message, ids, address). */
export const TEXT_MAX_BYTES = 4096
/** `request_data` is captured at ≤ 8 KiB (RequestData.ts); anything larger (an old stream entry) is replaced by a marker. */
const REQUEST_DATA_MAX_BYTES = 16_384
const ROLES_MAX = 64
const ROLE_MAX_BYTES = 256

const ELLIPSIS = "…"

const hasUnstorable = (text: string) =>
  !(text as string & { isWellFormed(): boolean }).isWellFormed() || text.includes("\u0000")

/** NUL and unpaired surrogates → U+FFFD. Almost every string is fine: the native check spares the regex. */
const replaceUnstorable = (text: string): string =>
  hasUnstorable(text)
    // eslint-disable-next-line no-control-regex -- NUL is exactly what must be matched
    ? text.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd")
    : text

/** At most `maxBytes` of UTF-8, cut between code points. */
export const truncateUtf8 = (text: string, maxBytes: number): string => {
  // A UTF-16 unit is at most 3 bytes of UTF-8 (a surrogate pair, two units, is 4).
  if (text.length * 3 <= maxBytes || Buffer.byteLength(text, "utf8") <= maxBytes) return text
  const budget = maxBytes - Buffer.byteLength(ELLIPSIS, "utf8")
  let bytes = 0
  let end = 0
  for (const char of text) {
    const size = Buffer.byteLength(char, "utf8")
    if (bytes + size > budget) break
    bytes += size
    end += char.length
  }
  return text.slice(0, end) + ELLIPSIS
}

export const storableText = (text: string, maxBytes: number = TEXT_MAX_BYTES): string =>
  truncateUtf8(replaceUnstorable(text), maxBytes)

/**
 * The escapes of a JSON text, one at a time (so `\\u0000`, an escaped backslash and "u0000", is
 * not one): a surrogate pair, `\u0000`, a lone surrogate, or any other escape. JSON.stringify
 * writes NUL and unpaired surrogates as such escapes, which jsonb refuses.
 */
const JSON_ESCAPE = /\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u0000|u[dD][89a-fA-F][0-9a-fA-F]{2}|[^])/g

/**
 * A JSON text jsonb accepts: NUL and unpaired surrogates become U+FFFD, in strings and keys alike,
 * whether escaped (as JSON.stringify writes them) or not; over `maxBytes`, a marker instead.
 */
export const storableJsonText = (json: string, maxBytes: number): string => {
  let text = replaceUnstorable(json)
  // Only the 6-character matches are unstorable (`\u0000`, a lone surrogate); a pair is 12, any other escape 2.
  if (text.includes("\\u")) text = text.replace(JSON_ESCAPE, (escape) => (escape.length === 6 ? "\ufffd" : escape))
  return text.length * 3 <= maxBytes || Buffer.byteLength(text, "utf8") <= maxBytes ? text : TRUNCATED
}

const TRUNCATED = JSON.stringify({ _truncated: true })

const int = (n: number) => Number.isFinite(n) ? Math.max(-2147483648, Math.min(2147483647, Math.round(n))) : 0

/** The columns of one `audit_logs` row. */
export const toRow = ({ entry: e, entryId }: StoredEntry) => ({
  entry_id: entryId,
  timestamp: e.timestamp,
  user_id: storableText(e.user_id, INDEXED_TEXT_MAX_BYTES),
  username: storableText(e.username, INDEXED_TEXT_MAX_BYTES),
  // Each role is storable text already: nothing for jsonb to refuse.
  user_roles: JSON.stringify(e.user_roles.slice(0, ROLES_MAX).map((r) => storableText(r, ROLE_MAX_BYTES))),
  action_type: storableText(e.action_type, INDEXED_TEXT_MAX_BYTES),
  resource: storableText(e.resource, INDEXED_TEXT_MAX_BYTES),
  outcome: e.outcome,
  ip_address: storableText(e.ip_address),
  user_agent: storableText(e.user_agent),
  request_id: storableText(e.request_id),
  correlation_id: storableText(e.correlation_id),
  response_status: int(e.response_status),
  duration_ms: int(e.duration_ms),
  // The captured JSON text itself (RequestData.ts): no second serialization.
  request_data: storableJsonText(requestDataJson(e.request_data), REQUEST_DATA_MAX_BYTES),
  error_message: e.error_message === null ? null : storableText(e.error_message)
})

/** A batch as the columns of `audit_logs`, one array per column, rows in the order of the batch. */
export const toColumns = (batch: ReadonlyArray<StoredEntry>) => {
  const entry_id: Array<string> = []
  const timestamp: Array<Date> = []
  const user_id: Array<string> = []
  const username: Array<string> = []
  const user_roles: Array<string> = []
  const action_type: Array<string> = []
  const resource: Array<string> = []
  const outcome: Array<string> = []
  const ip_address: Array<string> = []
  const user_agent: Array<string> = []
  const request_id: Array<string> = []
  const correlation_id: Array<string> = []
  const response_status: Array<number> = []
  const duration_ms: Array<number> = []
  const request_data: Array<string> = []
  const error_message: Array<string | null> = []
  for (const stored of batch) {
    const row = toRow(stored)
    entry_id.push(row.entry_id)
    timestamp.push(row.timestamp)
    user_id.push(row.user_id)
    username.push(row.username)
    user_roles.push(row.user_roles)
    action_type.push(row.action_type)
    resource.push(row.resource)
    outcome.push(row.outcome)
    ip_address.push(row.ip_address)
    user_agent.push(row.user_agent)
    request_id.push(row.request_id)
    correlation_id.push(row.correlation_id)
    response_status.push(row.response_status)
    duration_ms.push(row.duration_ms)
    request_data.push(row.request_data)
    error_message.push(row.error_message)
  }
  return {
    entry_id, timestamp, user_id, username, user_roles, action_type, resource, outcome, ip_address, user_agent,
    request_id, correlation_id, response_status, duration_ms, request_data, error_message
  }
}

/**
 * The last resort for a record the database still refused row by row: who, what, when and the
 * outcome survive (short, plain text); the free-form parts are dropped and say so.
 */
export const minimalEntry = ({ entry: e, entryId }: StoredEntry): StoredEntry => {
  const short = (s: string) => storableText(s, 128)
  const entry: AuditEntry = {
    ...e,
    user_id: short(e.user_id),
    username: short(e.username),
    user_roles: e.user_roles.slice(0, 8).map(short),
    action_type: short(e.action_type),
    resource: short(e.resource),
    outcome: e.outcome === "success" || e.outcome === "permission_denied" ? e.outcome : "error",
    ip_address: short(e.ip_address),
    user_agent: short(e.user_agent),
    request_id: short(e.request_id),
    correlation_id: short(e.correlation_id),
    request_data: { _unstorable: true },
    error_message: e.error_message === null ? null : short(e.error_message)
  }
  return { entryId, entry }
}
