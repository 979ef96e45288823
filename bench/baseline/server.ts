/**
 * The benchmark's yardstick (bench/README.md): a short hand-written Fastify 5 + pg + ioredis +
 * jose + ws server doing the hot-path work of the requests the workloads send, the way the
 * service does it — same SQL as src/Authors/Repo.ts and src/AuditLogs/Repo.ts, same pool size,
 * same limiter script, same token rules — and nothing the service could not do too (no caching
 * of responses, no skipped audit records).
 *
 * Per request: correlation id (accepted or generated, echoed) and request id; bearer JWT
 * verified with jose (asymmetric algorithms, issuer, audience, exp; verified tokens cached);
 * one rate-limit hit (Lua sliding window on Redis when REDIS_URL is set, else in process);
 * role check; the handler; an audit record pushed to a buffer that one writer drains with
 * multi-row INSERTs of at most 500 rows. WS `/web`: package 2 with a per-message rate check and
 * an audit record per message; `author.created` broadcast to every connection after a create
 * (through Redis pub/sub when REDIS_URL is set, as the service does across instances).
 *
 * Environment: PORT, HOST, DATABASE_URL (else embedded PGlite in BASELINE_DATA_DIR/pgdata, served
 * over pglite-socket like src/Db/Database.ts), DATABASE_POOL_MAX, REDIS_URL, REDIS_KEY_PREFIX,
 * JWT_PUBLIC_JWK_FILE, JWT_ISSUER, JWT_AUDIENCE, RATE_LIMIT_PER_MINUTE, RATE_LIMIT_BURST,
 * WS_MESSAGE_RATE_LIMIT, WS_MAX_CONNECTIONS_PER_USER.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import Fastify, { type FastifyReply, type FastifyRequest } from "fastify"
import { Redis } from "ioredis"
import { importJWK, type JWK, jwtVerify } from "jose"
import { randomUUID } from "node:crypto"
import { readdirSync, readFileSync } from "node:fs"
import type { IncomingMessage } from "node:http"
import { join } from "node:path"
import pg from "pg"
import { type RawData, WebSocket, WebSocketServer } from "ws"
import {
  ASYMMETRIC_ALGORITHMS, bearerToken, captureRequestData, correlationIdFrom, decodeCursor, encodeCursor, likePattern,
  makeMemoryLimiter, memberFactory, normalizeIp, pageCount, parseIsoDate, type RateDecision, rolesOf, SLIDING_WINDOW_LUA,
  SQL, storable, decision
} from "./shared.ts"

const env = (name: string, fallback: string) => process.env[name] ?? fallback
const int = (name: string, fallback: number) => Number(env(name, String(fallback)))
const POOL_MAX = int("DATABASE_POOL_MAX", 10)
const HTTP_LIMIT = int("RATE_LIMIT_PER_MINUTE", 60) + int("RATE_LIMIT_BURST", 10)
const WS_LIMIT = int("WS_MESSAGE_RATE_LIMIT", 100)
const WS_MAX_PER_USER = int("WS_MAX_CONNECTIONS_PER_USER", 5)
const PREFIX = env("REDIS_KEY_PREFIX", "authors:")
const CLIENT_ID = "author-directory"
const WINDOW_MS = 60_000
const SEND_QUEUE_MAX = 4 * 1024 * 1024 // bytes buffered for one WS client before it is dropped (src/Ws/Connection.ts SEND_BUFFER_MAX)
const BATCH_MAX = 500 // src/AuditLogs/Repo.ts INSERT_BATCH_MAX
const ZERO_ID = "00000000-0000-0000-0000-000000000000"
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

// ---- database ---------------------------------------------------------------------------------
const startDatabase = async () => {
  const url = process.env["DATABASE_URL"]
  if (url !== undefined && url !== "") return { url, close: async () => {} }
  const db = await PGlite.create({ dataDir: join(env("BASELINE_DATA_DIR", "./.data-baseline"), "pgdata"), extensions: { pg_trgm } })
  const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: POOL_MAX + 2 })
  await server.start()
  return { url: `postgres://postgres:postgres@${server.getServerConn()}/postgres`, close: async () => { await server.stop(); await db.close() } }
}
const database = await startDatabase()
const pool = new pg.Pool({ connectionString: database.url, max: POOL_MAX, application_name: "bench-baseline" })
pool.on("error", () => {})
/** A fresh database gets migrations/*.sql in order (the runner hands over an already seeded one). */
if ((await pool.query<{ t: string | null }>("SELECT to_regclass('public.authors')::text AS t")).rows[0]?.t == null) {
  const dir = new URL("../../migrations/", import.meta.url).pathname
  for (const file of readdirSync(dir).filter((f) => /^\d+_[\w-]+\.sql$/.test(f)).sort()) await pool.query(readFileSync(join(dir, file), "utf8"))
}

// ---- tokens -------------------------------------------------------------------------------------
interface Principal { readonly id: string; readonly username: string; readonly roles: ReadonlyArray<string>; readonly exp: number }
const jwk = JSON.parse(readFileSync(env("JWT_PUBLIC_JWK_FILE", "bench-public-jwk.json"), "utf8")) as JWK
const publicKey = await importJWK(jwk, typeof jwk.alg === "string" ? jwk.alg : "ES256")
const verifyOptions = { issuer: env("JWT_ISSUER", "urn:author-directory:dev-idp"), audience: env("JWT_AUDIENCE", CLIENT_ID), algorithms: ASYMMETRIC_ALGORITHMS }
const tokenCache = new Map<string, Principal>()
const verify = async (token: string): Promise<Principal | undefined> => {
  const cached = tokenCache.get(token)
  if (cached !== undefined) {
    if (cached.exp * 1000 > Date.now()) return cached
    tokenCache.delete(token)
    return undefined
  }
  try {
    const { payload } = await jwtVerify(token, publicKey, verifyOptions)
    const typ = payload["typ"]
    if (typeof payload.sub !== "string" || payload.sub === "" || typeof payload.exp !== "number") return undefined
    if (typ !== undefined && (typeof typ !== "string" || typ.toLowerCase() !== "bearer")) return undefined
    const username = payload["preferred_username"]
    const principal = { id: payload.sub, username: typeof username === "string" ? username : payload.sub, roles: rolesOf(payload, CLIENT_ID), exp: payload.exp }
    if (tokenCache.size >= 10_000) {
      const oldest = tokenCache.keys().next()
      if (oldest.done !== true) tokenCache.delete(oldest.value)
    }
    tokenCache.set(token, principal)
    return principal
  } catch {
    return undefined
  }
}

// ---- rate limit ---------------------------------------------------------------------------------
const redisOptions = { maxRetriesPerRequest: 1, enableOfflineQueue: true, connectTimeout: 2000, enableAutoPipelining: true } // as src/Store/Redis.ts
const redis = process.env["REDIS_URL"] ? new Redis(process.env["REDIS_URL"], redisOptions) : undefined
redis?.on("error", () => {})
redis?.defineCommand("adsSlidingWindow", { numberOfKeys: 1, lua: SLIDING_WINDOW_LUA })
type Script = (key: string, now: number | "", windowMs: number, limit: number, member: string) => Promise<[number, number, number, number]>
const script = redis === undefined ? undefined : (redis as unknown as { adsSlidingWindow: Script }).adsSlidingWindow.bind(redis)
const member = memberFactory()
const memoryLimiter = makeMemoryLimiter()
/** One hit; a store failure admits (RATE_LIMIT_FAIL_MODE=open, the service's default). */
const hit = async (key: string, limit: number): Promise<RateDecision | undefined> => {
  if (script === undefined) return memoryLimiter(key, limit, WINDOW_MS)
  try {
    // "" = the script scores the hit on Redis's TIME, as the service's does.
    const [allowed, count, oldest, now] = await script(`${PREFIX}ratelimit:${key}`, "", WINDOW_MS, limit, member(Date.now()))
    return decision(allowed === 1, limit, count, oldest < 0 ? undefined : oldest, now, WINDOW_MS)
  } catch {
    return undefined
  }
}

// ---- audit trail --------------------------------------------------------------------------------
interface AuditEntry {
  timestamp: Date; user_id: string; username: string; user_roles: ReadonlyArray<string>; action_type: string; resource: string
  outcome: string; ip_address: string; user_agent: string; request_id: string; correlation_id: string; response_status: number
  duration_ms: number; request_data: Record<string, unknown>; error_message: string | null
}
const AUDIT_COLUMNS = ["entry_id", "timestamp", "user_id", "username", "user_roles", "action_type", "resource", "outcome", "ip_address",
  "user_agent", "request_id", "correlation_id", "response_status", "duration_ms", "request_data", "error_message"]
const buffer: Array<{ entryId: string; entry: AuditEntry }> = []
let writing: Promise<void> | undefined
const clampInt = (n: number) => Math.max(-2147483648, Math.min(2147483647, Math.round(n)))
const insertBatch = async (batch: ReadonlyArray<{ entryId: string; entry: AuditEntry }>) => {
  const params: Array<unknown> = []
  const rows = batch.map(({ entryId, entry: e }) => {
    params.push(entryId, e.timestamp, e.user_id, e.username, JSON.stringify(e.user_roles), e.action_type, e.resource, e.outcome, e.ip_address,
      e.user_agent, e.request_id, e.correlation_id, clampInt(e.response_status), clampInt(e.duration_ms), JSON.stringify(e.request_data), e.error_message)
    return `(${AUDIT_COLUMNS.map((_, i) => `$${params.length - AUDIT_COLUMNS.length + i + 1}`).join(",")})`
  })
  await pool.query(`INSERT INTO audit_logs (${AUDIT_COLUMNS.map((c) => `"${c}"`).join(",")}) VALUES ${rows.join(",")} ${SQL.auditConflict}`, params)
}
/** One writer at a time, as the service's writer fiber: up to 500 rows per INSERT, retried until stored. */
const drain = async () => {
  while (buffer.length > 0) {
    const batch = buffer.splice(0, BATCH_MAX)
    try {
      await insertBatch(batch)
    } catch {
      buffer.unshift(...batch)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  writing = undefined
}
const audit = (entry: AuditEntry) => {
  if (buffer.length >= 100_000) return // the service's bounded buffer drops (and counts) overflow too
  buffer.push({ entryId: randomUUID(), entry: storable(entry) as AuditEntry })
  writing ??= drain()
}
const outcomeOf = (status: number) => (status === 403 ? "permission_denied" : status >= 400 ? "error" : "success")

// ---- SQL (src/Authors/Repo.ts, src/AuditLogs/Repo.ts) ------------------------------------------------
const AUTHOR_COLUMNS = SQL.authorColumns
interface AuthorRow { id: number; name: string; created_at: string }
interface AuthorFilters { id?: number | undefined; name?: string | undefined; search?: string | undefined }
const authorWhere = (f: AuthorFilters, params: Array<unknown>, afterId?: number) => {
  const clauses: Array<string> = []
  if (f.id !== undefined) clauses.push(`id = $${params.push(f.id)}`)
  if (f.name !== undefined) clauses.push(`name = $${params.push(f.name)}`)
  if (f.search !== undefined) clauses.push(`name ILIKE $${params.push(likePattern(f.search))}`)
  if (afterId !== undefined) clauses.push(`id > $${params.push(afterId)}`)
  return clauses.length === 0 ? "" : `WHERE (${clauses.join(" AND ")})`
}
const listAuthors = async (f: AuthorFilters) => {
  const params: Array<unknown> = []
  return (await pool.query<AuthorRow>(`SELECT ${AUTHOR_COLUMNS} FROM authors ${authorWhere(f, params)} ${SQL.authorsOrderBy}`, params)).rows
}
const pageAuthors = async (f: AuthorFilters, page: number, perPage: number, afterId: number | undefined) => {
  const params: Array<unknown> = []
  const filtered = f.id !== undefined || f.name !== undefined || f.search !== undefined
  const totalSql = filtered ? `SELECT ${SQL.countTotal} FROM authors ${authorWhere(f, params)}` : SQL.authorsTotal
  const chosen = afterId !== undefined
    ? `${SQL.pageColumns} ${authorWhere(f, params, afterId)} ${SQL.authorsOrderBy} LIMIT $${params.push(perPage + 1)}`
    : `${SQL.pageColumns} ${authorWhere(f, params)} ${SQL.authorsOrderBy} LIMIT $${params.push(perPage + 1)} OFFSET $${params.push((page - 1) * perPage)}`
  const sql = `${SQL.pageWithTotal}${totalSql}) AS t LEFT JOIN LATERAL (SELECT ${AUTHOR_COLUMNS} FROM (${chosen}) ${SQL.pageJoin}`
  const rows = (await pool.query<AuthorRow & { total: number }>(sql, params)).rows
  const items = rows.filter((r) => r.id !== null).map((r) => ({ id: r.id, name: r.name, created_at: r.created_at }))
  const hasMore = items.length > perPage
  if (hasMore) items.length = perPage
  const total = rows[0]?.total ?? 0
  const last = items[items.length - 1]
  return {
    items,
    meta: { page, per_page: perPage, total, pages: pageCount(total, perPage), next_cursor: hasMore && last !== undefined ? encodeCursor(last.id) : null, has_more: hasMore }
  }
}

interface AuditFilters { user_id?: string; username?: string; action_type?: string; resource?: string; outcome?: string; from?: Date | undefined; to?: Date | undefined }
const AUDIT_LIST_COLUMNS = `id::int AS id, ${SQL.auditTimestamp}, user_id, username, action_type, resource, outcome, ip_address,
  request_id, response_status, duration_ms`
const HOUR = 3_600_000
const auditWhere = (f: AuditFilters, params: Array<unknown>) => {
  const clauses: Array<string> = []
  for (const key of ["user_id", "username", "action_type", "resource", "outcome"] as const) {
    if (f[key] !== undefined) clauses.push(`${key} = $${params.push(f[key])}`)
  }
  if (f.from !== undefined) clauses.push(`"timestamp" >= $${params.push(f.from)}`)
  if (f.to !== undefined) clauses.push(`"timestamp" <= $${params.push(f.to)}`)
  return clauses.length === 0 ? "" : `WHERE (${clauses.join(" AND ")})`
}
/** The exact total as AuditRepo.total: selective filters count; others sum the hourly rollup plus the partial hours. */
const auditTotal = (f: AuditFilters, params: Array<unknown>): string => {
  const count = () => `SELECT ${SQL.countTotal} FROM audit_logs ${auditWhere(f, params)}`
  if (f.user_id !== undefined || f.username !== undefined || f.resource !== undefined) return count()
  const firstHour = f.from === undefined ? undefined : new Date(Math.ceil(f.from.getTime() / HOUR) * HOUR)
  const endHour = f.to === undefined ? undefined : new Date(Math.floor(f.to.getTime() / HOUR) * HOUR)
  if (firstHour !== undefined && endHour !== undefined && firstHour >= endHour) return count()
  const rollup: Array<string> = []
  if (f.action_type !== undefined) rollup.push(`action_type = $${params.push(f.action_type)}`)
  if (f.outcome !== undefined) rollup.push(`outcome = $${params.push(f.outcome)}`)
  if (firstHour !== undefined) rollup.push(`hour >= $${params.push(firstHour)}`)
  if (endHour !== undefined) rollup.push(`hour < $${params.push(endHour)}`)
  const sum = `(SELECT coalesce(sum(n), 0) FROM audit_log_hourly ${rollup.length === 0 ? "" : `WHERE (${rollup.join(" AND ")})`})`
  const head = firstHour === undefined ? "0" : `(SELECT count(*) FROM audit_logs ${auditWhere({ ...f, to: undefined }, params)} AND "timestamp" < $${params.push(firstHour)})`
  const tail = endHour === undefined ? "0" : `(SELECT count(*) FROM audit_logs ${auditWhere({ ...f, from: undefined }, params)} AND "timestamp" >= $${params.push(endHour)})`
  return `SELECT (${sum} + ${head} + ${tail})::int AS total`
}
const pageAuditLogs = async (f: AuditFilters, page: number, perPage: number) => {
  const p1: Array<unknown> = []
  const rowsSql = `SELECT ${AUDIT_LIST_COLUMNS} FROM audit_logs ${auditWhere(f, p1)}
    ${SQL.auditOrderBy} LIMIT $${p1.push(perPage)} OFFSET $${p1.push((page - 1) * perPage)}`
  const p2: Array<unknown> = []
  const totalSql = auditTotal(f, p2)
  const [rows, totals] = await Promise.all([pool.query(rowsSql, p1), pool.query<{ total: number }>(totalSql, p2)])
  const total = totals.rows[0]?.total ?? 0
  return { items: rows.rows, meta: { page, per_page: perPage, total, pages: pageCount(total, perPage), next_cursor: null, has_more: page * perPage < total } }
}

// ---- HTTP ---------------------------------------------------------------------------------------
interface Ctx { requestId: string; correlationId: string; startedAt: Date; t0: number; ip: string; user: Principal | undefined; error: string | null }
declare module "fastify" { interface FastifyRequest { ctx: Ctx } }
class HttpError {
  readonly status: number
  readonly detail: unknown
  constructor(status: number, detail: unknown) {
    this.status = status
    this.detail = detail
  }
}
const invalid = (loc: string, name: string, input: unknown, type = "int_parsing", msg = "Input should be a valid integer") =>
  new HttpError(422, [{ type, loc: [loc, name], msg, input }])

const app = Fastify({ logger: false, bodyLimit: 1_048_576, keepAliveTimeout: 65_000 })
app.decorateRequest("ctx", undefined as unknown as Ctx)
app.addHook("onRequest", async (req, reply) => {
  req.ctx = { requestId: randomUUID(), correlationId: correlationIdFrom(str(req.headers["x-correlation-id"])), startedAt: new Date(), t0: performance.now(), ip: normalizeIp(req.ip), user: undefined, error: null }
  reply.headers({
    "x-correlation-id": req.ctx.correlationId, "x-request-id": req.ctx.requestId, "x-content-type-options": "nosniff", "x-frame-options": "DENY",
    "referrer-policy": "no-referrer", "content-security-policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
  })
})
app.addHook("onResponse", async (req, reply) => {
  const { ctx } = req
  if (ctx.user === undefined) return
  const q = req.url.indexOf("?")
  audit({
    timestamp: ctx.startedAt, user_id: ctx.user.id, username: ctx.user.username, user_roles: ctx.user.roles, action_type: req.method,
    resource: q === -1 ? req.url : req.url.slice(0, q), outcome: outcomeOf(reply.statusCode), ip_address: ctx.ip, user_agent: str(req.headers["user-agent"]) ?? "",
    request_id: ctx.requestId, correlation_id: ctx.correlationId, response_status: reply.statusCode, duration_ms: Math.round(performance.now() - ctx.t0),
    request_data: captureRequestData(q === -1 ? undefined : Object.fromEntries(new URLSearchParams(req.url.slice(q + 1))), req.body),
    error_message: reply.statusCode >= 400 ? ctx.error ?? `HTTP ${reply.statusCode}` : null
  })
})
app.setErrorHandler((error: unknown, req, reply) => {
  const e = error instanceof HttpError ? error
    : typeof error === "object" && error !== null && "statusCode" in error && error.statusCode === 400
    ? new HttpError(422, [{ type: "json_invalid", loc: ["body"], msg: "JSON decode error", input: null }])
    : typeof error === "object" && error !== null && "statusCode" in error && error.statusCode === 413 ? new HttpError(413, "Request body too large")
    : new HttpError(500, "Internal server error")
  if (req.ctx !== undefined) req.ctx.error = typeof e.detail === "string" ? e.detail : JSON.stringify(e.detail).slice(0, 1000)
  if (e.status === 401) void reply.header("www-authenticate", "Bearer")
  void reply.code(e.status).send({ detail: e.detail })
})
app.setNotFoundHandler((_req, reply) => void reply.code(404).send({ detail: "Not Found" }))

const str = (v: unknown): string | undefined => (typeof v === "string" ? v : Array.isArray(v) && typeof v[0] === "string" ? v[0] : undefined)
/** CONTRACT §9 order: rate limit (keyed by the verified token's sub, else the IP) → 401 → 403. */
const gate = async (req: FastifyRequest, reply: FastifyReply, role: string): Promise<Principal> => {
  const token = bearerToken(req.headers.authorization)
  const principal = token === undefined ? undefined : await verify(token)
  const d = await hit(`http:${principal !== undefined ? `user:${principal.id}` : `ip:${req.ctx.ip}`}`, HTTP_LIMIT)
  if (d !== undefined) {
    void reply.headers({ "x-ratelimit-limit": d.limit, "x-ratelimit-remaining": d.remaining, "x-ratelimit-reset": d.resetSeconds })
    if (!d.allowed) {
      void reply.header("retry-after", d.retryAfterSeconds)
      throw new HttpError(429, "Rate limit exceeded")
    }
  }
  if (principal === undefined) throw new HttpError(401, token === undefined ? "Not authenticated" : "Could not validate credentials")
  req.ctx.user = principal
  if (!principal.roles.includes(role)) throw new HttpError(403, "Forbidden")
  return principal
}
type Query = Record<string, unknown>
const intParam = (q: Query, name: string, fallback?: number, min = -Infinity, max = Infinity): number | undefined => {
  const raw = str(q[name])
  if (raw === undefined) return fallback
  const trimmed = raw.trim()
  const n = Number(trimmed)
  if (!/^[+-]?\d+$/.test(trimmed) || !Number.isSafeInteger(n)) throw invalid("query", name, raw)
  if (n < min) throw invalid("query", name, raw, "greater_than_equal", `Input should be greater than or equal to ${min}`)
  if (n > max) throw invalid("query", name, raw, "less_than_equal", `Input should be less than or equal to ${max}`)
  return n
}
const textParam = (q: Query, name: string) => {
  const v = str(q[name])
  if (v !== undefined && ([...v].length > 1000 || v.includes("\u0000"))) throw invalid("query", name, v, "string_too_long", "String should have at most 1000 characters")
  return v
}
const MAX_PAGE = 2_147_483_647

app.get("/health", async (_req, reply) => {
  const check = (p: Promise<unknown> | undefined) =>
    p === undefined ? Promise.resolve("healthy") : Promise.race([p.then(() => "healthy", () => "unhealthy"), new Promise<string>((r) => setTimeout(r, 1000, "unhealthy"))])
  const [db, cache] = await Promise.all([check(pool.query("SELECT 1")), check(redis?.ping())])
  const status = db === "healthy" && cache === "healthy" ? "healthy" : "unhealthy"
  return reply.code(status === "healthy" ? 200 : 503).send({ status, database: db, redis: cache, websocket: { status: "healthy", active_connections: connections.size } })
})
app.get("/authors", async (req, reply) => {
  await gate(req, reply, "get-authors")
  const q = req.query as Query
  return listAuthors({ id: intParam(q, "id"), name: textParam(q, "name"), search: textParam(q, "search") })
})
app.get("/authors/paginated", async (req, reply) => {
  await gate(req, reply, "get-authors")
  const q = req.query as Query
  const cursorText = textParam(q, "cursor")
  const afterId = cursorText === undefined ? undefined : decodeCursor(cursorText)
  if (cursorText !== undefined && afterId === undefined) throw invalid("query", "cursor", cursorText, "value_error", "Invalid cursor")
  const page = intParam(q, "page", 1, 1, MAX_PAGE)!
  const perPage = Math.min(intParam(q, "per_page", 20, 1)!, 1000)
  return pageAuthors({ id: intParam(q, "id"), name: textParam(q, "name") }, page, perPage, afterId)
})
app.post("/authors", async (req, reply) => {
  await gate(req, reply, "create-author")
  const body = req.body
  const raw = typeof body === "object" && body !== null && "name" in body ? body.name : undefined
  if (typeof raw !== "string") throw new HttpError(422, [{ type: "missing", loc: ["body", "name"], msg: "Field required", input: body ?? null }])
  const name = raw.trim()
  const length = [...name].length
  if (length < 1 || length > 255 || name.includes("\u0000")) throw new HttpError(422, [{ type: "string_too_long", loc: ["body", "name"], msg: "String should have 1–255 characters", input: raw }])
  let author: AuthorRow | undefined
  try {
    author = (await pool.query<AuthorRow>(`INSERT INTO authors (name) VALUES ($1) RETURNING ${AUTHOR_COLUMNS}`, [name])).rows[0]
  } catch (error) {
    if (typeof error === "object" && error !== null && "code" in error && error.code === "23505") throw new HttpError(409, `Author with name ${name} already exists`)
    throw error
  }
  if (author !== undefined) publish(JSON.stringify({ pkg_id: 0, req_id: ZERO_ID, data: { event: "author.created", timestamp: new Date().toISOString(), author } }))
  return reply.code(201).send(author)
})
app.get("/audit-logs", async (req, reply) => {
  await gate(req, reply, "admin")
  const q = req.query as Query
  const date = (name: string, endOfDay: boolean) => {
    const raw = textParam(q, name)
    if (raw === undefined) return undefined
    const d = parseIsoDate(raw, endOfDay)
    if (d === undefined) throw invalid("query", name, raw, "datetime_from_date_parsing", "Input should be a valid datetime or date (ISO 8601)")
    return d
  }
  const filters: AuditFilters = { from: date("start_date", false), to: date("end_date", true) }
  for (const key of ["user_id", "username", "action_type", "resource", "outcome"] as const) {
    const v = textParam(q, key)
    if (v !== undefined) filters[key] = v
  }
  return pageAuditLogs(filters, intParam(q, "page", 1, 1, MAX_PAGE)!, intParam(q, "per_page", 20, 1, 100)!)
})

// ---- WebSocket /web -----------------------------------------------------------------------------
interface Connection { readonly ws: WebSocket; readonly user: Principal; readonly correlationId: string; readonly ip: string; readonly userAgent: string }
const connections = new Set<Connection>()
const perUser = new Map<string, number>()
const fanOut = (message: string) => {
  for (const c of connections) {
    if (!c.user.roles.includes("get-authors")) continue
    if (c.ws.bufferedAmount > SEND_QUEUE_MAX) c.ws.terminate() // bounded send queue: a slow client is dropped
    else c.ws.send(message)
  }
}
const channel = `${PREFIX}bench-baseline:events`
const subscriber = redis?.duplicate()
subscriber?.on("error", () => {})
subscriber?.on("message", (_channel: string, message: string) => fanOut(message))
await subscriber?.subscribe(channel)
const publish = (message: string) => (redis === undefined ? fanOut(message) : void redis.publish(channel, message).catch(() => fanOut(message)))

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const positiveInt = (u: unknown) => typeof u === "number" && Number.isSafeInteger(u) && u >= 1

/** Package 2 (GET_PAGINATED_AUTHORS): rate check → schema → permission → handler (CONTRACT §5). */
const onMessage = async (c: Connection, raw: RawData, isBinary: boolean) => {
  let msg: unknown
  try {
    msg = isBinary ? undefined : JSON.parse(raw.toString())
  } catch { /* closed below */ }
  if (!isRecord(msg) || typeof msg["pkg_id"] !== "number" || !Number.isInteger(msg["pkg_id"]) || typeof msg["req_id"] !== "string" || !UUID.test(msg["req_id"])) {
    c.ws.close(1003, "Invalid message format")
    return
  }
  const pkgId = msg["pkg_id"], reqId = msg["req_id"], data = msg["data"] ?? {}
  const startedAt = new Date(), t0 = performance.now()
  const reply = (status: number, body: unknown, meta: unknown = null) => {
    c.ws.send(JSON.stringify({ pkg_id: pkgId, req_id: reqId, status_code: status, data: body, meta }))
    audit({
      timestamp: startedAt, user_id: c.user.id, username: c.user.username, user_roles: c.user.roles, action_type: pkgId === 2 ? "WS:GET_PAGINATED_AUTHORS" : `WS:${pkgId}`,
      resource: "ws:/web", outcome: status === 3 ? "permission_denied" : status === 0 ? "success" : "error", ip_address: c.ip, user_agent: c.userAgent,
      request_id: reqId, correlation_id: c.correlationId, response_status: status, duration_ms: Math.round(performance.now() - t0),
      request_data: captureRequestData(undefined, data), error_message: status === 0 ? null : JSON.stringify(body).slice(0, 1000)
    })
  }
  const d = await hit(`ws:msg:user:${c.user.id}`, WS_LIMIT)
  if (d !== undefined && !d.allowed) return reply(1, { msg: "Rate limit exceeded", retry_after: d.retryAfterSeconds })
  if (pkgId !== 2) return reply(2, { msg: `Unknown pkg_id ${pkgId}` })
  const filters = isRecord(data) ? data["filters"] ?? {} : undefined
  const cursor = isRecord(data) ? data["cursor"] : undefined
  const afterId = typeof cursor === "string" ? decodeCursor(cursor) : undefined
  if (!isRecord(data) || !positiveInt(data["page"]) || !positiveInt(data["per_page"]) || (cursor != null && afterId === undefined)) {
    return reply(2, { msg: "Invalid pagination parameters", errors: [{ loc: ["data"], msg: "page and per_page must be integers >= 1", type: "value_error" }] })
  }
  if (!isRecord(filters) || (filters["id"] !== undefined && !Number.isSafeInteger(filters["id"])) || (filters["name"] !== undefined && typeof filters["name"] !== "string")) {
    return reply(2, { msg: "Invalid filter parameters", errors: [{ loc: ["data", "filters"], msg: "invalid filters", type: "value_error" }] })
  }
  if (!c.user.roles.includes("get-authors")) return reply(3, { msg: "Permission denied" })
  try {
    // WebSocket `name` is a case-insensitive substring (CONTRACT §9).
    const page = await pageAuthors({ id: filters["id"] as number | undefined, search: filters["name"] as string | undefined }, data["page"] as number, Math.min(data["per_page"] as number, 1000), afterId)
    reply(0, page.items, page.meta)
  } catch {
    reply(1, { msg: "Database error occurred" })
  }
}

const wss = new WebSocketServer({ noServer: true, maxPayload: 65_536 })
const onConnection = (ws: WebSocket, req: IncomingMessage, url: URL) => {
  const param = url.searchParams.get("Authorization") ?? url.searchParams.get("token") ?? url.searchParams.get("access_token")
  const token = param === null ? undefined : /^Bearer\s/i.test(param) ? bearerToken(param) : param
  const queued: Array<[RawData, boolean]> = []
  ws.on("message", (raw, isBinary) => void queued.push([raw, isBinary]))
  void (token === undefined ? Promise.resolve(undefined) : verify(token)).then((user) => {
    if (user === undefined) return ws.close(4001, "Invalid or expired token")
    const count = perUser.get(user.id) ?? 0
    if (count >= WS_MAX_PER_USER) return ws.close(1008, "Maximum concurrent connections exceeded")
    perUser.set(user.id, count + 1)
    const c: Connection = { ws, user, correlationId: correlationIdFrom(str(req.headers["x-correlation-id"])), ip: normalizeIp(req.socket.remoteAddress ?? ""), userAgent: str(req.headers["user-agent"]) ?? "" }
    connections.add(c)
    const expiry = setTimeout(() => ws.close(4001, "Session expired"), Math.min(2 ** 31 - 1, user.exp * 1000 + 10_000 - Date.now()))
    ws.on("close", () => {
      connections.delete(c)
      clearTimeout(expiry)
      const n = (perUser.get(user.id) ?? 1) - 1
      if (n <= 0) perUser.delete(user.id)
      else perUser.set(user.id, n)
    })
    ws.removeAllListeners("message")
    ws.on("message", (raw, isBinary) => void onMessage(c, raw, isBinary))
    for (const [raw, isBinary] of queued.splice(0)) void onMessage(c, raw, isBinary)
  })
}
app.server.on("upgrade", (req: IncomingMessage, socket, head) => {
  const url = new URL(req.url ?? "/", "http://localhost")
  if (url.pathname !== "/web") return void socket.destroy()
  wss.handleUpgrade(req, socket, head, (ws) => onConnection(ws, req, url))
})

// ---- lifecycle ----------------------------------------------------------------------------------
await app.listen({ port: int("PORT", 8001), host: env("HOST", "127.0.0.1") })
const shutdown = async () => {
  for (const c of connections) c.ws.close(1001, "Server shutting down")
  await app.close()
  while (writing !== undefined) await writing
  await pool.end()
  subscriber?.disconnect()
  await redis?.quit().catch(() => undefined)
  await database.close()
  process.exit(0)
}
process.once("SIGTERM", () => void shutdown())
process.once("SIGINT", () => void shutdown())
