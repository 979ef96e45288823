/**
 * The benchmark's yardstick (bench/README.md): this API as a competent Node developer writes it by
 * hand with Fastify 5 + pg + ioredis + jose + ws, with its own schema (./schema.ts) and its own
 * SQL — not the service's design. It answers the requests the workloads send with the same
 * bodies the service gives, and does the per-request work the service's contract requires:
 *
 * - correlation id (accepted or generated) and request id echoed, security headers;
 * - bearer JWT verified with jose (asymmetric algorithms, issuer, audience, exp, `typ`), verified
 *   tokens cached until they expire;
 * - one rate-limit round trip per request and per WebSocket message: an exact sliding window in a
 *   Lua script on Redis (./helpers.ts) when REDIS_URL is set, else in process; X-RateLimit-*;
 * - role check, then body parsing and validation (Fastify's JSON schemas), then the handler;
 * - one audit record per authenticated request and per WebSocket message, buffered in memory and
 *   written by one writer with batched INSERTs (never dropped: a full buffer makes callers wait);
 * - WebSocket `/web`: package 2, per-user connection count, session expiry, and `author.created`,
 *   `author.updated`, `author.deleted` broadcast to every connection (through Redis pub/sub when
 *   REDIS_URL is set), each client's send buffer bounded.
 *
 * Totals are `count(*)`, pages LIMIT/OFFSET or `id > $1` keyset, search `ILIKE`; no response
 * caching, no journal of audit records, no triggers.
 *
 * Environment: PORT, HOST, DATABASE_URL (else embedded PGlite in BASELINE_DATA_DIR/pgdata, served
 * over pglite-socket, as the service embeds it), DATABASE_POOL_MAX, REDIS_URL, REDIS_KEY_PREFIX,
 * JWT_PUBLIC_JWK_FILE, JWT_ISSUER, JWT_AUDIENCE, RATE_LIMIT_PER_MINUTE, RATE_LIMIT_BURST,
 * WS_MESSAGE_RATE_LIMIT, WS_MAX_CONNECTIONS_PER_USER.
 */
import { PGlite } from "@electric-sql/pglite"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import Fastify, { type FastifyError, type FastifyReply, type FastifyRequest } from "fastify"
import { Redis } from "ioredis"
import { importJWK, type JWK, jwtVerify } from "jose"
import { randomBytes, randomUUID } from "node:crypto"
import { readFileSync } from "node:fs"
import type { IncomingMessage } from "node:http"
import { join } from "node:path"
import pg from "pg"
import { type RawData, WebSocket, WebSocketServer } from "ws"
import {
  bearer, checkName, containsPattern, correlationId, decodeCursor, encodeCursor, formatTimestamp, isAuthorId, type LimitDecision, limitDecision,
  makeMemoryWindow, parseDate, requestData, SLIDING_WINDOW_SCRIPT, storableText, tokenRoles
} from "./helpers.ts"
import { SCHEMA } from "./schema.ts"

const env = (name: string, fallback: string) => process.env[name] || fallback
const int = (name: string, fallback: number) => Number(env(name, String(fallback)))
const POOL_MAX = int("DATABASE_POOL_MAX", 10)
const HTTP_LIMIT = int("RATE_LIMIT_PER_MINUTE", 60) + int("RATE_LIMIT_BURST", 10)
const WS_LIMIT = int("WS_MESSAGE_RATE_LIMIT", 100)
const WS_MAX_PER_USER = int("WS_MAX_CONNECTIONS_PER_USER", 5)
const PREFIX = env("REDIS_KEY_PREFIX", "baseline:")
const AUDIENCE = env("JWT_AUDIENCE", "author-directory")
const WINDOW_MS = 60_000
const SEND_BUFFER_MAX = 4 * 1024 * 1024
const AUDIT_BATCH = 500
const AUDIT_BUFFER_MAX = 50_000
const INT32_MAX = 2_147_483_647
const ZERO_ID = "00000000-0000-0000-0000-000000000000"
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

// ---- database -----------------------------------------------------------------------------------
// bigint (counts, audit ids) as numbers; timestamptz as the API's text (microseconds, UTC, no zone).
pg.types.setTypeParser(20, (v: string) => Number(v))
pg.types.setTypeParser(1184, formatTimestamp)

const startDatabase = async () => {
  const url = process.env["DATABASE_URL"]
  if (url !== undefined && url !== "") return { url, external: true, close: async () => {} }
  const db = await PGlite.create({ dataDir: join(env("BASELINE_DATA_DIR", "./.data-baseline"), "pgdata") })
  const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: POOL_MAX + 2 })
  await server.start()
  return { url: `postgres://postgres:postgres@${server.getServerConn()}/postgres`, external: false, close: async () => { await server.stop(); await db.close() } }
}
const database = await startDatabase()
// Connections are kept while the server idles between bursts (pg's default drops them after 10 s).
const pool = new pg.Pool({ connectionString: database.url, max: POOL_MAX, idleTimeoutMillis: 60_000, query_timeout: 10_000, application_name: "bench-baseline" })
pool.on("error", () => {})
await pool.query(SCHEMA)
/**
 * On a PostgreSQL server, each distinct statement text runs as a named prepared statement (parsed
 * and planned once per connection, as pg documents); the texts are a small fixed set. Not on
 * PGlite, where the service does not prepare either.
 */
const PREPARE = database.external && env("DATABASE_PREPARED_STATEMENTS", "true") === "true"
const statementNames = new Map<string, string>()
const query = <R extends pg.QueryResultRow>(text: string, values: Array<unknown>) => {
  let name = PREPARE ? statementNames.get(text) : undefined
  if (PREPARE && name === undefined && statementNames.size < 256) statementNames.set(text, name = `s${statementNames.size}`)
  return pool.query<R>(name === undefined ? { text, values } : { name, text, values })
}

// ---- tokens -------------------------------------------------------------------------------------
interface User { readonly id: string; readonly username: string; readonly roles: ReadonlyArray<string>; readonly exp: number }
const jwk = JSON.parse(readFileSync(env("JWT_PUBLIC_JWK_FILE", "bench-public-jwk.json"), "utf8")) as JWK
const publicKey = await importJWK(jwk, typeof jwk.alg === "string" ? jwk.alg : "ES256")
const verifyOptions = {
  issuer: env("JWT_ISSUER", "urn:author-directory:dev-idp"),
  audience: AUDIENCE,
  algorithms: ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"],
  requiredClaims: ["sub", "exp"]
}
const verified = new Map<string, User>()
const authenticate = async (token: string): Promise<User | undefined> => {
  const hit = verified.get(token)
  if (hit !== undefined) {
    if (hit.exp * 1000 > Date.now()) return hit
    verified.delete(token)
    return undefined
  }
  try {
    const { payload } = await jwtVerify(token, publicKey, verifyOptions)
    const typ = payload["typ"]
    if (typ !== undefined && (typeof typ !== "string" || typ.toLowerCase() !== "bearer")) return undefined
    const name = payload["preferred_username"]
    const user: User = {
      id: storableText(payload.sub!),
      username: storableText(typeof name === "string" ? name : payload.sub!),
      roles: tokenRoles(payload, AUDIENCE).map(storableText),
      exp: payload.exp!
    }
    if (verified.size >= 10_000) verified.delete(verified.keys().next().value!)
    verified.set(token, user)
    return user
  } catch {
    return undefined
  }
}

// ---- rate limit ---------------------------------------------------------------------------------
type SlidingWindow = (key: string, limit: number, windowMs: number, member: string) => Promise<[number, number, number]>
const redis = process.env["REDIS_URL"]
  ? new Redis(process.env["REDIS_URL"], { enableAutoPipelining: true, maxRetriesPerRequest: 1, connectTimeout: 2000, commandTimeout: 1000 })
  : undefined
redis?.on("error", () => {})
redis?.defineCommand("slidingWindow", { numberOfKeys: 1, lua: SLIDING_WINDOW_SCRIPT })
const slidingWindow = redis === undefined ? undefined : (redis as unknown as { slidingWindow: SlidingWindow }).slidingWindow.bind(redis)
const memoryWindow = makeMemoryWindow(WINDOW_MS)
const memberPrefix = randomBytes(6).toString("hex")
let memberSeq = 0
/** One admission; a Redis failure admits (fail open) without headers. */
const admit = async (key: string, limit: number): Promise<LimitDecision | undefined> => {
  if (slidingWindow === undefined) return memoryWindow(key, limit)
  try {
    const [allowed, count, resetMs] = await slidingWindow(`${PREFIX}rl:${key}`, limit, WINDOW_MS, `${memberPrefix}:${++memberSeq}`)
    return limitDecision(allowed === 1, limit, count, resetMs)
  } catch {
    return undefined
  }
}

// ---- audit trail --------------------------------------------------------------------------------
interface AuditRecord {
  timestamp: string; user: User; action_type: string; resource: string; outcome: string; ip_address: string; user_agent: string
  request_id: string; correlation_id: string; response_status: number; duration_ms: number; request_data: string; error_message: string | null
}
const INSERT_AUDIT = `INSERT INTO audit_logs ("timestamp", user_id, username, user_roles, action_type, resource, outcome, ip_address,
  user_agent, request_id, correlation_id, response_status, duration_ms, request_data, error_message)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::text[], $8::text[],
  $9::text[], $10::text[], $11::text[], $12::int[], $13::int[], $14::jsonb[], $15::text[])`
const auditBuffer: Array<AuditRecord> = []
let writer: Promise<void> | undefined
const drained: Array<() => void> = []
const insertAudit = (batch: ReadonlyArray<AuditRecord>) => {
  const columns: Array<Array<unknown>> = Array.from({ length: 15 }, () => [])
  for (const r of batch) {
    const values = [r.timestamp, r.user.id, r.user.username, JSON.stringify(r.user.roles), r.action_type, r.resource, r.outcome, r.ip_address,
      r.user_agent, r.request_id, r.correlation_id, r.response_status, r.duration_ms, r.request_data, r.error_message]
    for (let i = 0; i < 15; i++) columns[i]!.push(values[i])
  }
  return query(INSERT_AUDIT, columns)
}
const writeAudit = async () => {
  await new Promise((resolve) => setImmediate(resolve)) // let this tick's records join the batch
  while (auditBuffer.length > 0) {
    const batch = auditBuffer.slice(0, AUDIT_BATCH)
    try {
      await insertAudit(batch)
      auditBuffer.splice(0, batch.length)
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200)) // the database is away: keep the records, try again
    }
    if (auditBuffer.length < AUDIT_BUFFER_MAX) for (const wake of drained.splice(0)) wake()
  }
  writer = undefined
}
const audit = async (record: AuditRecord) => {
  while (auditBuffer.length >= AUDIT_BUFFER_MAX) await new Promise<void>((resolve) => drained.push(resolve))
  auditBuffer.push(record)
  writer ??= writeAudit()
}
const outcomeOf = (status: number) => (status === 403 ? "permission_denied" : status >= 400 ? "error" : "success")

// ---- SQL ----------------------------------------------------------------------------------------
interface Author { id: number; name: string; created_at: string }
interface AuthorFilters { id?: number | undefined; name?: string | undefined; search?: string | undefined }
const authorConditions = (f: AuthorFilters) => {
  const conditions: Array<string> = []
  const params: Array<unknown> = []
  if (f.id !== undefined) conditions.push(`id = $${params.push(f.id)}`)
  if (f.name !== undefined) conditions.push(`name = $${params.push(f.name)}`)
  if (f.search !== undefined) conditions.push(`name ILIKE $${params.push(containsPattern(f.search))}`)
  return { conditions, params }
}
const whereOf = (conditions: ReadonlyArray<string>) => (conditions.length === 0 ? "" : ` WHERE ${conditions.join(" AND ")}`)

const listAuthors = async (f: AuthorFilters) => {
  const { conditions, params } = authorConditions(f)
  return (await query<Author>(`SELECT id, name, created_at FROM authors${whereOf(conditions)} ORDER BY id`, params)).rows
}

const pageAuthors = async (f: AuthorFilters, page: number, perPage: number, afterId: number | undefined) => {
  const { conditions, params } = authorConditions(f)
  const rowsParams = [...params]
  const rowsConditions = afterId === undefined ? conditions : [...conditions, `id > $${rowsParams.push(afterId)}`]
  const window = afterId === undefined
    ? `LIMIT $${rowsParams.push(perPage + 1)} OFFSET $${rowsParams.push((page - 1) * perPage)}`
    : `LIMIT $${rowsParams.push(perPage + 1)}`
  const [rows, count] = await Promise.all([
    query<Author>(`SELECT id, name, created_at FROM authors${whereOf(rowsConditions)} ORDER BY id ${window}`, rowsParams),
    query<{ total: number }>(`SELECT count(*) AS total FROM authors${whereOf(conditions)}`, params)
  ])
  const items = rows.rows
  const hasMore = items.length > perPage
  if (hasMore) items.length = perPage
  const total = count.rows[0]?.total ?? 0
  return {
    items,
    meta: {
      page, per_page: perPage, total, pages: Math.ceil(total / perPage),
      next_cursor: hasMore ? encodeCursor(items[items.length - 1]!.id) : null, has_more: hasMore
    }
  }
}

interface AuditFilters { user_id?: string; username?: string; action_type?: string; resource?: string; outcome?: string; from?: Date; to?: Date }
const pageAuditLogs = async (f: AuditFilters, page: number, perPage: number) => {
  const conditions: Array<string> = []
  const params: Array<unknown> = []
  for (const key of ["user_id", "username", "action_type", "resource", "outcome"] as const) {
    if (f[key] !== undefined) conditions.push(`${key} = $${params.push(f[key])}`)
  }
  if (f.from !== undefined) conditions.push(`"timestamp" >= $${params.push(f.from)}`)
  if (f.to !== undefined) conditions.push(`"timestamp" <= $${params.push(f.to)}`)
  const where = whereOf(conditions)
  const [rows, count] = await Promise.all([
    query(`SELECT id, "timestamp", user_id, username, action_type, resource, outcome, ip_address, request_id, response_status, duration_ms
      FROM audit_logs${where} ORDER BY "timestamp" DESC, id DESC LIMIT $${params.length + 1} OFFSET $${params.length + 2}`,
      [...params, perPage, (page - 1) * perPage]),
    query<{ total: number }>(`SELECT count(*) AS total FROM audit_logs${where}`, params)
  ])
  const total = count.rows[0]?.total ?? 0
  return { items: rows.rows, meta: { page, per_page: perPage, total, pages: Math.ceil(total / perPage), next_cursor: null, has_more: page * perPage < total } }
}

// ---- HTTP ---------------------------------------------------------------------------------------
declare module "fastify" {
  interface FastifyContextConfig { role?: string }
  interface FastifyRequest { correlationId: string; startedAt: string; t0: number; user: User | undefined; failure: string | undefined }
}
class HttpError extends Error {
  readonly status: number
  readonly detail: unknown
  constructor(status: number, detail: unknown) {
    super(typeof detail === "string" ? detail : "invalid request")
    this.status = status
    this.detail = detail
  }
}

const SECURITY_HEADERS = {
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
}
const newCorrelationId = () => randomBytes(4).toString("hex")
const clientIp = (ip: string) => (ip.startsWith("::ffff:") ? ip.slice(7) : ip)

const app = Fastify({ logger: false, disableRequestLogging: true, bodyLimit: 1_048_576, keepAliveTimeout: 65_000, genReqId: () => randomUUID() })
app.decorateRequest("correlationId", "")
app.decorateRequest("startedAt", "")
app.decorateRequest("t0", 0)
app.decorateRequest("user", undefined)
app.decorateRequest("failure", undefined)

app.addHook("onRequest", async (req, reply) => {
  req.correlationId = correlationId(req.headers["x-correlation-id"], newCorrelationId)
  req.startedAt = new Date().toISOString()
  req.t0 = performance.now()
  void reply.headers({ "x-correlation-id": req.correlationId, "x-request-id": req.id, ...SECURITY_HEADERS })
})

/**
 * Before the body is read, in this order: rate limit (by the verified token's subject, else the
 * IP) → 401 → 403. So a request whose body then fails to parse is still attributed and audited.
 */
app.addHook("preParsing", async (req: FastifyRequest, reply: FastifyReply) => {
  const role = req.routeOptions.config.role
  if (role === undefined) return
  const token = bearer(req.headers.authorization)
  const user = token === undefined ? undefined : await authenticate(token)
  const limit = await admit(user !== undefined ? `user:${user.id}` : `ip:${clientIp(req.ip)}`, HTTP_LIMIT)
  if (limit !== undefined) {
    void reply.headers({ "x-ratelimit-limit": limit.limit, "x-ratelimit-remaining": limit.remaining, "x-ratelimit-reset": limit.resetSeconds })
    if (!limit.allowed) {
      void reply.header("retry-after", Math.max(1, limit.resetSeconds))
      throw new HttpError(429, "Rate limit exceeded")
    }
  }
  if (user === undefined) {
    void reply.header("www-authenticate", "Bearer")
    throw new HttpError(401, token === undefined ? "Not authenticated" : "Could not validate credentials")
  }
  req.user = user
  if (!user.roles.includes(role)) throw new HttpError(403, "Forbidden")
})

app.addHook("onResponse", async (req, reply) => {
  const user = req.user
  if (user === undefined) return
  const q = req.url.indexOf("?")
  const status = reply.statusCode
  await audit({
    timestamp: req.startedAt, user, action_type: req.method, resource: q === -1 ? req.url : req.url.slice(0, q), outcome: outcomeOf(status),
    ip_address: clientIp(req.ip), user_agent: storableText(req.headers["user-agent"] ?? ""), request_id: req.id, correlation_id: req.correlationId,
    response_status: status, duration_ms: Math.round(performance.now() - req.t0),
    request_data: requestData(q === -1 ? undefined : req.query as Record<string, unknown>, req.body),
    error_message: status >= 400 ? storableText(req.failure ?? `HTTP ${status}`) : null
  })
})

app.setErrorHandler((error: FastifyError | HttpError, req, reply) => {
  let status = 500
  let detail: unknown = "Internal server error"
  if (error instanceof HttpError) {
    status = error.status
    detail = error.detail
  } else if (error.validation !== undefined) {
    status = 422
    detail = error.validation.map((v) => ({ type: v.keyword, loc: [error.validationContext ?? "query", ...v.instancePath.split("/").filter((p) => p !== ""), ...(typeof v.params["missingProperty"] === "string" ? [v.params["missingProperty"]] : [])], msg: v.message ?? "invalid" }))
  } else if (error.code === "FST_ERR_CTP_INVALID_JSON_BODY" || error.code === "FST_ERR_CTP_EMPTY_JSON_BODY") {
    status = 422
    detail = [{ type: "json_invalid", loc: ["body"], msg: "JSON decode error" }]
  } else if (error.statusCode === 413 || error.statusCode === 415) {
    status = error.statusCode
    detail = status === 413 ? "Request body too large" : "Unsupported Media Type"
  }
  req.failure = typeof detail === "string" ? detail : JSON.stringify(detail).slice(0, 1000)
  void reply.code(status).send({ detail })
})
app.setNotFoundHandler((_req, reply) => void reply.code(404).send({ detail: "Not Found" }))

const int32 = { type: "integer", minimum: -INT32_MAX - 1, maximum: INT32_MAX }
const text = { type: "string", maxLength: 1000, pattern: "^[^\\x00]*$" }
const pageNumber = { type: "integer", minimum: 1, maximum: INT32_MAX, default: 1 }
const author = {
  type: "object",
  properties: { id: { type: "integer" }, name: { type: "string" }, created_at: { type: "string" } },
  required: ["id", "name", "created_at"]
}
const meta = {
  type: "object",
  properties: {
    page: { type: "integer" }, per_page: { type: "integer" }, total: { type: "integer" }, pages: { type: "integer" },
    next_cursor: { type: ["string", "null"] }, has_more: { type: "boolean" }
  }
}
const auditItem = {
  type: "object",
  properties: Object.fromEntries([
    ...["timestamp", "user_id", "username", "action_type", "resource", "outcome", "ip_address", "request_id"].map((k) => [k, { type: "string" }]),
    ...["id", "response_status", "duration_ms"].map((k) => [k, { type: "integer" }])
  ])
}
const authorsRole = { role: "get-authors" }

interface ListQuery { id?: number; name?: string; search?: string }
app.get<{ Querystring: ListQuery }>("/authors", {
  config: authorsRole,
  schema: { querystring: { type: "object", properties: { id: int32, name: text, search: text } }, response: { 200: { type: "array", items: author } } }
}, (req) => listAuthors(req.query))

interface PageQuery { page: number; per_page: number; id?: number; name?: string; cursor?: string }
app.get<{ Querystring: PageQuery }>("/authors/paginated", {
  config: authorsRole,
  schema: {
    querystring: {
      type: "object",
      properties: { page: pageNumber, per_page: { type: "integer", minimum: 1, maximum: INT32_MAX, default: 20 }, id: int32, name: text, cursor: { type: "string", maxLength: 64 } }
    },
    response: { 200: { type: "object", properties: { items: { type: "array", items: author }, meta } } }
  }
}, (req) => {
  const { page, per_page, cursor, id, name } = req.query
  const afterId = cursor === undefined ? undefined : decodeCursor(cursor)
  if (cursor !== undefined && afterId === undefined) throw new HttpError(422, [{ type: "value_error", loc: ["query", "cursor"], msg: "Invalid cursor" }])
  return pageAuthors({ id, name }, page, Math.min(per_page, 1000), afterId)
})

/** `author.created`, `author.updated` or `author.deleted` with the row, to every WebSocket client holding `get-authors`. */
const announce = (event: string, author: Author) =>
  publish(JSON.stringify({ pkg_id: 0, req_id: ZERO_ID, data: { event, timestamp: new Date().toISOString(), author } }))
const nameOf = (body: unknown) => {
  const checked = checkName(body)
  if ("problem" in checked) throw new HttpError(422, [checked.problem])
  return checked.name
}
const nameTaken = (error: unknown, name: string) =>
  (error as { code?: unknown }).code === "23505" ? new HttpError(409, `Author with name ${name} already exists`) : error
const notFound = (id: number) => new HttpError(404, `Author with ID ${id} not found`)

app.post("/authors", { config: { role: "create-author" }, schema: { response: { 201: author } } }, async (req, reply) => {
  const name = nameOf(req.body)
  let created: Author
  try {
    created = (await query<Author>("INSERT INTO authors (name) VALUES ($1) RETURNING id, name, created_at", [name])).rows[0]!
  } catch (error) {
    throw nameTaken(error, name)
  }
  announce("author.created", created)
  return reply.code(201).send(created)
})

interface IdParams { author_id: number }
const idParams = { type: "object", properties: { author_id: { type: "integer" } }, required: ["author_id"] }

app.put<{ Params: IdParams }>("/authors/:author_id", { config: { role: "update-author" }, schema: { params: idParams, response: { 200: author } } }, async (req) => {
  const name = nameOf(req.body)
  const id = req.params.author_id
  if (!isAuthorId(id)) throw notFound(id)
  let renamed: Author | undefined
  try {
    renamed = (await query<Author>("UPDATE authors SET name = $1 WHERE id = $2 RETURNING id, name, created_at", [name, id])).rows[0]
  } catch (error) {
    throw nameTaken(error, name)
  }
  if (renamed === undefined) throw notFound(id)
  announce("author.updated", renamed)
  return renamed
})

app.delete<{ Params: IdParams }>("/authors/:author_id", { config: { role: "delete-author" }, schema: { params: idParams } }, async (req, reply) => {
  const id = req.params.author_id
  const deleted = isAuthorId(id) ? (await query<Author>("DELETE FROM authors WHERE id = $1 RETURNING id, name, created_at", [id])).rows[0] : undefined
  if (deleted === undefined) throw notFound(id)
  announce("author.deleted", deleted)
  return reply.code(204).send()
})

interface AuditQuery { page: number; per_page: number; user_id?: string; username?: string; action_type?: string; resource?: string; outcome?: string; start_date?: string; end_date?: string }
app.get<{ Querystring: AuditQuery }>("/audit-logs", {
  config: { role: "admin" },
  schema: {
    querystring: {
      type: "object",
      properties: {
        page: pageNumber, per_page: { type: "integer", minimum: 1, maximum: 100, default: 20 },
        user_id: text, username: text, action_type: text, resource: text, outcome: text, start_date: text, end_date: text
      }
    },
    response: { 200: { type: "object", properties: { items: { type: "array", items: auditItem }, meta } } }
  }
}, (req) => {
  const { page, per_page, start_date, end_date, ...exact } = req.query
  const date = (name: string, value: string | undefined, endOfDay: boolean) => {
    if (value === undefined) return undefined
    const d = parseDate(value, endOfDay)
    if (d === undefined) throw new HttpError(422, [{ type: "datetime_parsing", loc: ["query", name], msg: "Input should be an ISO 8601 date or datetime" }])
    return d
  }
  const from = date("start_date", start_date, false)
  const to = date("end_date", end_date, true)
  return pageAuditLogs({ ...exact, ...(from !== undefined ? { from } : {}), ...(to !== undefined ? { to } : {}) }, page, per_page)
})

app.get("/health", async (_req, reply) => {
  const probe = (p: Promise<unknown> | undefined) =>
    p === undefined ? "healthy" : Promise.race([p.then(() => "healthy", () => "unhealthy"), new Promise<string>((r) => setTimeout(r, 1000, "unhealthy"))])
  const [db, cache] = await Promise.all([probe(pool.query("SELECT 1")), probe(redis?.ping())])
  const status = db === "healthy" && cache === "healthy" ? "healthy" : "unhealthy"
  return reply.code(status === "healthy" ? 200 : 503).send({ status, database: db, redis: cache, websocket: { status: "healthy", active_connections: connections.size } })
})

// ---- WebSocket /web -----------------------------------------------------------------------------
interface Connection { readonly ws: WebSocket; readonly user: User; readonly correlationId: string; readonly ip: string; readonly userAgent: string }
const connections = new Set<Connection>()
const perUser = new Map<string, number>()
/** A client whose unread replies pass the bound is dropped rather than buffered without end. */
const send = (ws: WebSocket, text: string) => {
  if (ws.bufferedAmount > SEND_BUFFER_MAX) ws.terminate()
  else ws.send(text)
}
const fanOut = (message: string) => {
  for (const c of connections) if (c.user.roles.includes("get-authors")) send(c.ws, message)
}
const channel = `${PREFIX}events`
const subscriber = redis?.duplicate()
subscriber?.on("error", () => {})
subscriber?.on("message", (_channel: string, message: string) => fanOut(message))
await subscriber?.subscribe(channel)
const publish = (message: string) => {
  if (redis === undefined) fanOut(message)
  else redis.publish(channel, message).catch(() => fanOut(message))
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const positiveInt32 = (u: unknown): u is number => typeof u === "number" && Number.isInteger(u) && u >= 1 && u <= INT32_MAX

/** Package 2 (paginated authors): rate check → validation → permission → handler, one audit record per message. */
const onMessage = async (c: Connection, raw: RawData, isBinary: boolean) => {
  let msg: unknown
  try {
    msg = isBinary ? undefined : JSON.parse(raw.toString())
  } catch { /* not JSON: closed below */ }
  if (!isObject(msg) || !Number.isInteger(msg["pkg_id"]) || typeof msg["req_id"] !== "string" || !UUID.test(msg["req_id"])) {
    c.ws.close(1003, "Invalid message format")
    return
  }
  const pkgId = msg["pkg_id"] as number
  const reqId = msg["req_id"]
  const data = msg["data"] ?? {}
  const startedAt = new Date().toISOString()
  const t0 = performance.now()
  const answer = (status: number, body: unknown, meta: unknown = null) => {
    send(c.ws, JSON.stringify({ pkg_id: pkgId, req_id: reqId, status_code: status, data: body, meta }))
    void audit({
      timestamp: startedAt, user: c.user, action_type: pkgId === 2 ? "WS:GET_PAGINATED_AUTHORS" : `WS:${pkgId}`, resource: "/web",
      outcome: status === 3 ? "permission_denied" : status === 0 ? "success" : "error", ip_address: c.ip, user_agent: c.userAgent,
      request_id: reqId, correlation_id: c.correlationId, response_status: status, duration_ms: Math.round(performance.now() - t0),
      request_data: requestData(undefined, data), error_message: status === 0 ? null : storableText(JSON.stringify(body).slice(0, 1000))
    })
  }
  const limit = await admit(`ws:${c.user.id}`, WS_LIMIT)
  if (limit !== undefined && !limit.allowed) return answer(1, { msg: "Rate limit exceeded", retry_after: Math.max(1, limit.resetSeconds) })
  if (pkgId !== 2) return answer(2, { msg: `Unsupported pkg_id ${pkgId}` })
  const filters = isObject(data) ? data["filters"] ?? {} : undefined
  if (!isObject(data) || !positiveInt32(data["page"]) || !positiveInt32(data["per_page"])) {
    return answer(2, { msg: "Invalid pagination parameters", errors: [{ loc: ["data"], msg: "page and per_page must be integers >= 1", type: "value_error" }] })
  }
  if (!isObject(filters) || (filters["id"] !== undefined && !(Number.isInteger(filters["id"]) && Math.abs(filters["id"] as number) <= INT32_MAX)) ||
    (filters["name"] !== undefined && (typeof filters["name"] !== "string" || filters["name"].length > 1000 || filters["name"].includes("\u0000")))) {
    return answer(2, { msg: "Invalid filter parameters", errors: [{ loc: ["data", "filters"], msg: "id must be an integer, name a string", type: "value_error" }] })
  }
  if (!c.user.roles.includes("get-authors")) return answer(3, { msg: "Permission denied" })
  try {
    // Over WebSocket `name` is a case-insensitive substring.
    const perPage = Math.min(data["per_page"] as number, 1000)
    const page = await pageAuthors({ id: filters["id"] as number | undefined, search: filters["name"] as string | undefined }, data["page"] as number, perPage, undefined)
    answer(0, page.items, page.meta)
  } catch {
    answer(1, { msg: "Database error occurred" })
  }
}

const wss = new WebSocketServer({ noServer: true, maxPayload: 65_536 })
const onConnection = (ws: WebSocket, req: IncomingMessage, url: URL) => {
  const param = url.searchParams.get("Authorization") ?? url.searchParams.get("token") ?? url.searchParams.get("access_token")
  const token = param === null ? undefined : /^Bearer\s/i.test(param) ? bearer(param) : param
  const early: Array<[RawData, boolean]> = []
  ws.on("message", (raw, isBinary) => void early.push([raw, isBinary]))
  ws.on("error", () => {})
  void (token === undefined ? Promise.resolve(undefined) : authenticate(token)).then((user) => {
    if (user === undefined) return ws.close(4001, "Invalid or expired token")
    const c: Connection = {
      ws, user, correlationId: correlationId(req.headers["x-correlation-id"], newCorrelationId), ip: clientIp(req.socket.remoteAddress ?? ""),
      userAgent: storableText(req.headers["user-agent"] ?? "")
    }
    const count = perUser.get(user.id) ?? 0
    if (count >= WS_MAX_PER_USER) {
      void audit({
        timestamp: new Date().toISOString(), user, action_type: "WS:CONNECT", resource: "/web", outcome: "error", ip_address: c.ip, user_agent: c.userAgent,
        request_id: randomUUID(), correlation_id: c.correlationId, response_status: 1008, duration_ms: 0, request_data: "{}", error_message: "Maximum concurrent connections exceeded"
      })
      return ws.close(1008, "Maximum concurrent connections exceeded")
    }
    perUser.set(user.id, count + 1)
    connections.add(c)
    const expiry = setTimeout(() => ws.close(4001, "Session expired"), Math.min(2 ** 31 - 1, Math.max(0, user.exp * 1000 - Date.now())))
    ws.on("close", () => {
      connections.delete(c)
      clearTimeout(expiry)
      const n = (perUser.get(user.id) ?? 1) - 1
      if (n <= 0) perUser.delete(user.id)
      else perUser.set(user.id, n)
    })
    ws.removeAllListeners("message")
    ws.on("message", (raw, isBinary) => void onMessage(c, raw, isBinary))
    for (const [raw, isBinary] of early.splice(0)) void onMessage(c, raw, isBinary)
  })
}
app.server.on("upgrade", (req: IncomingMessage, socket, head) => {
  const url = new URL(req.url ?? "/", "http://localhost")
  if (url.pathname !== "/web") {
    socket.end("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    return
  }
  wss.handleUpgrade(req, socket, head, (ws) => onConnection(ws, req, url))
})

// ---- lifecycle ----------------------------------------------------------------------------------
await app.listen({ port: int("PORT", 8001), host: env("HOST", "127.0.0.1") })
const shutdown = async () => {
  for (const c of connections) c.ws.close(1001, "Server shutting down")
  await app.close()
  while (writer !== undefined) await writer
  await pool.end()
  subscriber?.disconnect()
  await redis?.quit().catch(() => undefined)
  await database.close()
  process.exit(0)
}
process.once("SIGTERM", () => void shutdown())
process.once("SIGINT", () => void shutdown())
