/**
 * The baseline's small pure pieces, in their own module so the unit suite can check them without
 * starting a server (test/unit/bench.parity.test.ts). Written for the baseline, not copied from
 * src/: where they behave like the service it is because the API's answers require it.
 */

/** `YYYY-MM-DDTHH:MM:SS.ffffff` in UTC, from PostgreSQL's text form of a timestamptz (e.g. `2026-01-31 12:00:00.5+02`). */
const PG_TIMESTAMPTZ = /^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?([+-])(\d{2})(?::(\d{2}))?(?::(\d{2}))?$/
const pad = (n: number, width = 2) => String(n).padStart(width, "0")
export const formatTimestamp = (text: string): string => {
  const m = PG_TIMESTAMPTZ.exec(text)
  if (m === null) {
    // Not the usual form (e.g. a year past 9999): let Date read it, at millisecond precision.
    const d = new Date(text)
    return Number.isNaN(d.getTime()) ? text : `${d.toISOString().slice(0, 23)}000`
  }
  const [, y, mo, d, h, mi, s, frac = "", sign, oh, om = "0", os = "0"] = m
  const fraction = frac.padEnd(6, "0")
  const offsetSeconds = (Number(oh) * 3600 + Number(om) * 60 + Number(os)) * (sign === "-" ? -1 : 1)
  if (offsetSeconds === 0) return `${y}-${mo}-${d}T${h}:${mi}:${s}.${fraction}`
  // Offsets are whole seconds: only the seconds part moves, the fraction stays as it is.
  const t = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)) - offsetSeconds * 1000)
  return `${pad(t.getUTCFullYear(), 4)}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())}T${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}.${fraction}`
}

const INT32_MAX = 2_147_483_647

/** An id the baseline's `integer` column can hold: any other is an author that cannot exist (404, no query). */
export const isAuthorId = (id: number) => Number.isInteger(id) && id >= 1 && id <= INT32_MAX

export interface NameProblem { readonly type: string; readonly loc: ReadonlyArray<string>; readonly msg: string }

/**
 * The name of a create or a rename body: trimmed, 1 to 255 characters (code points), no NUL.
 * Otherwise the 422's detail, in the baseline's own wording.
 */
export const checkName = (body: unknown): { readonly name: string } | { readonly problem: NameProblem } => {
  const raw = typeof body === "object" && body !== null ? (body as { name?: unknown }).name : undefined
  if (typeof raw !== "string") return { problem: { type: "string_type", loc: ["body", "name"], msg: "Input should be a valid string" } }
  const name = raw.trim()
  const length = [...name].length
  if (length < 1 || length > 255 || name.includes("\u0000")) {
    return { problem: { type: "string_length", loc: ["body", "name"], msg: "String should have 1 to 255 characters" } }
  }
  return { name }
}

/** The baseline's keyset cursor: opaque to clients (its own format, not the service's). */
export const encodeCursor = (lastId: number) => Buffer.from(`after:${lastId}`).toString("base64url")
export const decodeCursor = (cursor: string): number | undefined => {
  if (cursor.length > 40) return undefined
  const m = /^after:(\d{1,10})$/.exec(Buffer.from(cursor, "base64url").toString("latin1"))
  const id = m === null ? NaN : Number(m[1])
  return Number.isSafeInteger(id) && id <= INT32_MAX ? id : undefined
}

/** `ILIKE` substring pattern with the user's `%`, `_` and `\` taken literally. */
export const containsPattern = (term: string) => `%${term.replace(/[\\%_]/g, "\\$&")}%`

/** Text PostgreSQL can store: NUL and unpaired surrogates become U+FFFD (else the insert of the whole batch fails). */
export const storableText = (s: string) =>
  // eslint-disable-next-line no-control-regex -- NUL is what must be matched
  s.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd")

const SECRET = /^(password|passwd|secret|token|access_token|refresh_token|authorization|api_key|client_secret)$/i
const REQUEST_DATA_MAX = 8192

const scrub = (value: unknown, depth: number): unknown => {
  if (typeof value === "string") return storableText(value)
  if (typeof value !== "object" || value === null) return value
  if (depth > 20) return "[too deep]"
  if (Array.isArray(value)) return value.map((v) => scrub(v, depth + 1))
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) out[storableText(k)] = SECRET.test(k) ? "[REDACTED]" : scrub(v, depth + 1)
  return out
}

/**
 * What the audit record keeps of a request: its query and body, secrets redacted, at most 8 KiB
 * of JSON (a part over it is replaced by its size). Returned as JSON text, ready for the insert.
 */
export const requestData = (query: Record<string, unknown> | undefined, body: unknown): string => {
  const data: Record<string, unknown> = {}
  if (query !== undefined && Object.keys(query).length > 0) data["query"] = scrub(query, 0)
  if (body !== undefined && body !== null) data["body"] = scrub(body, 0)
  let json = JSON.stringify(data)
  for (const part of ["body", "query"] as const) {
    if (Buffer.byteLength(json) <= REQUEST_DATA_MAX) break
    if (data[part] === undefined) continue
    data[part] = { truncated_bytes: Buffer.byteLength(JSON.stringify(data[part])) }
    json = JSON.stringify(data)
  }
  return Buffer.byteLength(json) <= REQUEST_DATA_MAX ? json : "{\"truncated\":true}"
}

/**
 * Exact sliding window on Redis: one ZSET of admission times per key, trimmed to the window on
 * every call. Returns `{allowed, admitted in the window, ms until the oldest leaves}` — what
 * X-RateLimit-Remaining and X-RateLimit-Reset need. Times are Redis's, so instances agree.
 * KEYS[1] the window; ARGV: limit, window in ms, a member unique to this call.
 */
export const SLIDING_WINDOW_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local allowed = 0
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  count = count + 1
  allowed = 1
  redis.call('PEXPIRE', KEYS[1], window)
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local reset = 0
if oldest[2] then reset = tonumber(oldest[2]) + window - now end
return {allowed, count, reset}
`

export interface LimitDecision {
  readonly allowed: boolean
  readonly limit: number
  readonly remaining: number
  /** Whole seconds until a slot frees (0 when the window is empty). */
  readonly resetSeconds: number
}

export const limitDecision = (allowed: boolean, limit: number, count: number, resetMs: number): LimitDecision =>
  ({ allowed, limit, remaining: Math.max(0, limit - count), resetSeconds: Math.max(0, Math.ceil(resetMs / 1000)) })

/**
 * The same exact sliding window in process (no Redis): per key, the admission times in a queue
 * whose expired head is skipped, compacted now and then. Idle keys are swept once per window.
 */
export const makeMemoryWindow = (windowMs: number, now: () => number = Date.now) => {
  interface Log { times: Array<number>; head: number }
  const logs = new Map<string, Log>()
  let lastSweep = now()
  return (key: string, limit: number): LimitDecision => {
    const t = now()
    if (t - lastSweep >= windowMs) {
      lastSweep = t
      for (const [k, log] of logs) if (log.times.length === log.head || log.times[log.times.length - 1]! <= t - windowMs) logs.delete(k)
    }
    let log = logs.get(key)
    if (log === undefined) logs.set(key, log = { times: [], head: 0 })
    while (log.head < log.times.length && log.times[log.head]! <= t - windowMs) log.head++
    if (log.head > 1024 && log.head * 2 > log.times.length) {
      log.times = log.times.slice(log.head)
      log.head = 0
    }
    let count = log.times.length - log.head
    const allowed = count < limit
    if (allowed) {
      log.times.push(t)
      count++
    }
    const oldest = log.times[log.head]
    return limitDecision(allowed, limit, count, oldest === undefined ? 0 : oldest + windowMs - t)
  }
}

const strings = (u: unknown): Array<string> => (Array.isArray(u) ? u.filter((x): x is string => typeof x === "string") : [])
const field = (u: unknown, key: string): unknown => (typeof u === "object" && u !== null ? (u as Record<string, unknown>)[key] : undefined)

/** Roles from a token: top-level `roles`, Keycloak's `realm_access.roles` and `resource_access.<client>.roles`. */
export const tokenRoles = (payload: Record<string, unknown>, clientId: string): Array<string> =>
  [...new Set([...strings(payload["roles"]), ...strings(field(payload["realm_access"], "roles")), ...strings(field(field(payload["resource_access"], clientId), "roles"))])]

export const bearer = (header: string | undefined): string | undefined => {
  if (header === undefined) return undefined
  const m = /^Bearer +(\S+) *$/i.exec(header)
  return m === null ? undefined : m[1]
}

const CORRELATION_ID = /^[A-Za-z0-9._-]{1,64}$/
/** The caller's X-Correlation-ID when it is 1–64 of `[A-Za-z0-9._-]`, else 8 new hex characters. */
export const correlationId = (header: unknown, random: () => string): string =>
  typeof header === "string" && CORRELATION_ID.test(header) ? header : random()

const ISO_DATE = /^\d{4}-\d{2}-\d{2}$/
const ISO_DATETIME = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?$/i
/** An ISO 8601 date or date-time (UTC when no zone); a bare end date means the whole day. */
export const parseDate = (text: string, endOfDay: boolean): Date | undefined => {
  let d: Date
  if (ISO_DATE.test(text)) {
    d = new Date(`${text}T00:00:00Z`)
    if (!Number.isNaN(d.getTime()) && endOfDay) d = new Date(d.getTime() + 86_400_000 - 1)
    if (!Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) !== text) return undefined // 2026-02-30
  } else {
    const m = ISO_DATETIME.exec(text)
    if (m === null) return undefined
    d = new Date(m[1] === undefined ? `${text.replace(" ", "T")}Z` : text.replace(" ", "T"))
  }
  return Number.isNaN(d.getTime()) ? undefined : d
}
