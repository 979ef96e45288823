/**
 * The few pure pieces the baseline must do exactly like the service, copied from `src/` rather
 * than imported (importing them would load Effect into the baseline process and inflate its RSS
 * and startup). `bench/lib/parity.ts` checks every copy against the original before each run,
 * so a change in `src/` that is not mirrored here stops the benchmark instead of skewing it.
 */
import { randomBytes } from "node:crypto"

/**
 * SQL fragments as src/Authors/Repo.ts and src/AuditLogs/Repo.ts write them; the runner checks
 * each appears verbatim there, and that those files use no other ORDER BY.
 */
export const SQL = {
  authorColumns: `id::int AS id, name, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS created_at`,
  /** Qualified: a bare `id` would name the output column `id::int AS id`, which no index serves. */
  authorsOrderBy: "ORDER BY authors.id",
  /** A page's rows are chosen on the bare columns, then only they are formatted (`AS page`). */
  pageColumns: "SELECT id, name, created_at FROM authors",
  /** …and joined to the total's single row: one statement per page. */
  pageWithTotal: "SELECT t.total, p.* FROM (",
  pageJoin: "AS page) AS p ON true ORDER BY p.id",
  pageOrderBy: "ORDER BY p.id",
  authorsTotal: "SELECT total::int AS total FROM author_stats",
  countTotal: "count(*)::int AS total",
  auditTimestamp: `to_char("timestamp" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS "timestamp"`,
  auditOrderBy: `ORDER BY audit_logs."timestamp" DESC, audit_logs.id DESC`,
  auditConflict: "ON CONFLICT (entry_id) DO NOTHING"
} as const

/** src/RateLimit/RedisRateLimiter.ts SLIDING_WINDOW_LUA, verbatim. */
export const SLIDING_WINDOW_LUA = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
local allowed = 0
if count < limit then
  redis.call('ZADD', key, now, ARGV[4])
  count = count + 1
  allowed = 1
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local oldestScore = -1
if oldest[2] then oldestScore = tonumber(oldest[2]) end
if count > 0 then redis.call('PEXPIRE', key, window) end
return {allowed, count, oldestScore, now}
`

export interface RateDecision {
  readonly allowed: boolean
  readonly limit: number
  readonly remaining: number
  readonly resetSeconds: number
  readonly retryAfterSeconds: number
}

/** src/RateLimit/RateLimiter.ts `decision`. */
export const decision = (allowed: boolean, limit: number, count: number, oldest: number | undefined, now: number, windowMs: number): RateDecision => {
  const untilFree = oldest === undefined ? 0 : Math.max(0, oldest + windowMs - now)
  return {
    allowed,
    limit,
    remaining: Math.max(0, limit - count),
    resetSeconds: Math.ceil(untilFree / 1000),
    retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil(untilFree / 1000))
  }
}

/** src/RateLimit/RateLimiter.ts `makeMemoryRateLimiter`: the in-process sliding window log. */
export const makeMemoryLimiter = () => {
  const windows = new Map<string, Array<number>>()
  let lastSweep = 0
  const sweep = (now: number, windowMs: number) => {
    if (now - lastSweep < windowMs) return
    lastSweep = now
    for (const [key, hits] of windows) {
      if (hits.length === 0 || hits[hits.length - 1]! <= now - windowMs) windows.delete(key)
    }
  }
  return (key: string, limit: number, windowMs: number): RateDecision => {
    const now = Date.now()
    sweep(now, windowMs)
    let hits = windows.get(key)
    if (hits === undefined) {
      hits = []
      windows.set(key, hits)
    }
    let expired = 0
    while (expired < hits.length && hits[expired]! <= now - windowMs) expired++
    if (expired > 0) hits.splice(0, expired)
    if (hits.length < limit) {
      hits.push(now)
      return decision(true, limit, hits.length, hits[0], now, windowMs)
    }
    return decision(false, limit, hits.length, hits[0], now, windowMs)
  }
}

/** ZSET members unique per hit (src/RateLimit/RedisRateLimiter.ts). */
export const memberFactory = () => {
  const instance = randomBytes(6).toString("hex")
  let sequence = 0
  return (now: number) => `${now}:${instance}:${(sequence = (sequence + 1) % Number.MAX_SAFE_INTEGER)}`
}

/** src/Authors/Repo.ts `likePattern`. */
export const likePattern = (term: string) => `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`

/** src/Domain/Pagination.ts `encodeCursor` / `decodeCursor` (undefined for Option.none). */
export const encodeCursor = (lastId: number): string => Buffer.from(`a:${lastId}`, "utf8").toString("base64url")

export const decodeCursor = (cursor: string): number | undefined => {
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(cursor)) return undefined
  const match = /^a:(\d{1,16})$/.exec(Buffer.from(cursor, "base64url").toString("utf8"))
  if (match === null) return undefined
  const id = Number(match[1])
  return Number.isSafeInteger(id) ? id : undefined
}

export const pageCount = (total: number, perPage: number) => (total === 0 ? 0 : Math.ceil(total / perPage))

/** src/Edge/RequestContext.ts `correlationIdFrom`. */
const CORRELATION_ID = /^[A-Za-z0-9._-]{1,64}$/
export const correlationIdFrom = (header: string | undefined): string =>
  header !== undefined && CORRELATION_ID.test(header) ? header : Math.floor(Math.random() * 0x1_0000_0000).toString(16).padStart(8, "0")

/** src/AuditLogs/Api.ts `parseIsoDate`. */
const ISO_8601 = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|z|[+-]\d{2}:?\d{2})?)?$/
export const parseIsoDate = (text: string, endOfDay: boolean): Date | undefined => {
  const m = ISO_8601.exec(text.trim())
  if (m === null) return undefined
  const [, y, mo, d, h, mi, s, frac, zone] = m
  const year = Number(y), month = Number(mo), day = Number(d)
  const hour = Number(h ?? 0), minute = Number(mi ?? 0), second = Number(s ?? 0)
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return undefined
  const probe = new Date(Date.UTC(year, month - 1, day))
  if (probe.getUTCDate() !== day || probe.getUTCMonth() !== month - 1) return undefined
  const millis = frac === undefined ? 0 : Math.floor(Number(`0.${frac}`) * 1000)
  let time = Date.UTC(year, month - 1, day, hour, minute, second, millis)
  if (h === undefined && endOfDay) time += 86_400_000 - 1
  if (zone !== undefined && zone.toUpperCase() !== "Z") {
    const sign = zone.startsWith("-") ? -1 : 1
    const digits = zone.slice(1).replace(":", "")
    time -= sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60_000
  }
  const date = new Date(time)
  return Number.isNaN(date.getTime()) ? undefined : date
}

/** src/AuditLogs/RequestData.ts `captureRequestData` (secrets redacted, at most 8 KiB). */
const REQUEST_DATA_MAX_BYTES = 8192
const SECRET_KEYS = new Set([
  "password", "passwd", "secret", "token", "access_token", "refresh_token", "authorization", "api_key",
  "client_secret", "credit_card", "card_number", "cvv", "ssn"
])
const redact = (value: unknown, depth = 0): unknown => {
  if (depth > 32) return "[TRUNCATED]"
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1))
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {}
    for (const [key, v] of Object.entries(value)) out[key] = SECRET_KEYS.has(key.toLowerCase()) ? "[REDACTED]" : redact(v, depth + 1)
    return out
  }
  return value
}
const byteLength = (value: unknown) => Buffer.byteLength(JSON.stringify(value) ?? "", "utf8")
export const captureRequestData = (query: Record<string, string | ReadonlyArray<string>> | undefined, body: unknown): Record<string, unknown> => {
  const data: Record<string, unknown> = {}
  if (query !== undefined && Object.keys(query).length > 0) data["query"] = redact(query)
  if (body !== undefined && body !== null) data["body"] = redact(body)
  if (byteLength(data) <= REQUEST_DATA_MAX_BYTES) return data
  for (const part of ["body", "query"] as const) {
    if (data[part] !== undefined) {
      data[part] = { _truncated: true, _bytes: byteLength(data[part]) }
      if (byteLength(data) <= REQUEST_DATA_MAX_BYTES) return data
    }
  }
  return { _truncated: true }
}

/** src/AuditLogs/Writer.ts `storable`: NUL and unpaired surrogates become U+FFFD (PostgreSQL cannot store them). */
export const storable = (value: unknown): unknown => {
  // eslint-disable-next-line no-control-regex -- NUL is exactly what must be matched
  if (typeof value === "string") return value.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd")
  if (Array.isArray(value)) return value.map(storable)
  if (value instanceof Date || typeof value !== "object" || value === null) return value
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [storable(k) as string, storable(v)]))
}

/** src/Auth/TokenVerifier.ts: accepted algorithms and the roles union of CONTRACT §3. */
export const ASYMMETRIC_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]

const stringArray = (u: unknown): ReadonlyArray<string> => Array.isArray(u) ? u.filter((x): x is string => typeof x === "string") : []
const record = (u: unknown): Record<string, unknown> => typeof u === "object" && u !== null ? u as Record<string, unknown> : {}
export const rolesOf = (payload: Record<string, unknown>, clientId: string): ReadonlyArray<string> => {
  const realm = stringArray(record(payload["realm_access"])["roles"])
  const client = stringArray(record(record(payload["resource_access"])[clientId])["roles"])
  const top = stringArray(payload["roles"])
  return [...new Set([...realm, ...client, ...top])]
}

/** src/Auth/TokenVerifier.ts `bearerToken`. */
export const bearerToken = (header: string | undefined): string | undefined => {
  if (header === undefined) return undefined
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header)
  return match?.[1]
}

/** src/Edge/ClientIp.ts `normalizeIp`. */
export const normalizeIp = (ip: string): string => {
  const trimmed = ip.trim()
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(trimmed)
  return mapped?.[1] ?? trimmed
}
