/**
 * Reliability faults, property-based, HTTP (docs/http-api.md, docs/errors-and-limits.md): more than 10,000 generated
 * requests per run over every endpoint — authors, audit logs, login, profiling, probes, metrics,
 * docs and unknown paths — with valid and hostile path segments, query keys and values, headers
 * (Authorization variants, X-Correlation-ID, X-Forwarded-For, Content-Type, User-Agent) and bodies
 * (oversized, NUL and other control characters, escapes that are not UTF-8, unpaired surrogates,
 * deep JSON, wrong types, huge numbers), 16 in flight. Sent with node:http so paths stay raw.
 *
 * Properties: no response is a 5xx; every error has a JSON body with `detail`; every response
 * carries a well-formed X-Correlation-ID (the caller's when it was valid); a body over the limit is
 * a 413; two Authorization lines are a 400, whatever the body. Requests that the HTTP parser itself refuses (raw bytes that are not ASCII in the request
 * target, control characters in a header, a header section over 16 KiB…) are held to the same
 * error-body rule. Afterwards the audit trail still advances.
 */
import fc from "fast-check"
import { generateKeyPair, SignJWT } from "jose"
import { randomUUID } from "node:crypto"
import http from "node:http"
import net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseCidr } from "../../src/Domain/Cidr.ts"
import { awaitAuditRecord } from "../support/AuditTrail.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { login, request, signToken, startTestApp, type TestApp } from "../support/TestApp.ts"

const REQUESTS = 10_000
const IN_FLIGHT = 16
const BATCH = 64
const BODY_LIMIT = 1_048_576
const ADMIN_ROLES = ["admin", "user", "get-authors", "create-author", "update-author", "delete-author"]
/** Liveness guard only (no request legitimately takes this long); not a performance threshold. */
const HANG_MS = 20_000
/** The kinds of request `build` generates (every endpoint, unknown paths, known paths with any method). */
const ENDPOINT_KINDS = 18
const CORRELATION_ID = /^[A-Za-z0-9._-]{1,64}$/

let app: TestApp
let port: number
let agent: http.Agent
let admin: string

// ---------------------------------------------------------------------------------------------
// Requests and their outcomes

type HeaderValue = string | ReadonlyArray<string>

interface Probe {
  /** Which endpoint (or kind of path) the generator aimed at; for the failure message. */
  readonly endpoint: string
  readonly method: string
  /** The raw request target, exactly as sent. */
  readonly target: string
  readonly headers: Readonly<Record<string, HeaderValue>>
  readonly body: Buffer | undefined
  /** Sent with `Transfer-Encoding: chunked` instead of `Content-Length`. */
  readonly chunked: boolean
}

type Outcome =
  | { readonly status: number; readonly headers: http.IncomingHttpHeaders; readonly body: Buffer }
  | { readonly error: string }

const clip = (s: string, n = 160) => (s.length > n ? `${s.slice(0, n)}…(${s.length} chars)` : s)

const describeProbe = (p: Probe) => {
  const headers = Object.entries(p.headers).map(([k, v]) => `${k}: ${clip(JSON.stringify(v), 90)}`).join("; ")
  const body = p.body === undefined
    ? "no body"
    : `body ${p.body.length} bytes${p.chunked ? " (chunked)" : ""}: ${clip(JSON.stringify(p.body.toString("latin1")), 200)}`
  return `[${p.endpoint}] ${p.method} ${clip(p.target, 300)} | ${headers} | ${body}`
}

const withToString = (p: Probe): Probe => Object.assign(p, { [fc.toStringMethod]: () => describeProbe(p) })

const describeOutcome = (o: Outcome) =>
  "error" in o
    ? `no response: ${o.error}`
    : `${o.status} content-type=${String(o.headers["content-type"])} body=${clip(JSON.stringify(o.body.toString("utf8")), 300)}`

const previousOnSocket = new WeakMap<object, Probe>()

const send = (p: Probe) =>
  new Promise<Outcome>((resolve, reject) => {
    const headers: Record<string, string | Array<string>> = {}
    for (const [k, v] of Object.entries(p.headers)) headers[k] = typeof v === "string" ? v : [...v]
    if (p.body !== undefined) {
      if (p.chunked) headers["transfer-encoding"] = "chunked"
      else headers["content-length"] = String(p.body.length)
    }
    let req: http.ClientRequest
    try {
      req = http.request({ agent, host: "127.0.0.1", port, method: p.method, path: p.target, headers }, (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }))
        res.on("error", (e) => resolve({ error: e.message }))
      })
      // A hang is a failure like any other: reported with its request (and the one before it on the
      // same keep-alive connection) instead of a test timeout.
      req.once("socket", (socket) => {
        const before = previousOnSocket.get(socket)
        previousOnSocket.set(socket, p)
        req.setTimeout(HANG_MS, () =>
          req.destroy(new Error(`no response within ${HANG_MS / 1000} s; the request before it on this connection: ${before === undefined ? "none" : describeProbe(before)}`)))
      })
    } catch (e) {
      // The generator must only make requests node:http sends as they are.
      return reject(new Error(`generator bug: node:http refused ${describeProbe(p)}: ${String(e)}`))
    }
    req.on("error", (e) => resolve({ error: `${(e as NodeJS.ErrnoException).code ?? ""} ${e.message}` }))
    if (p.body !== undefined && p.chunked && p.body.length > 1) {
      // Two chunks, so the server really sees a chunked body.
      req.write(p.body.subarray(0, p.body.length >> 1))
      req.end(p.body.subarray(p.body.length >> 1))
    } else req.end(p.body)
  })

/** What is wrong with the answer to `p`, or undefined when it keeps every property. */
const violation = (p: Probe, o: Outcome): string | undefined => {
  const oversized = p.body !== undefined && p.body.length > BODY_LIMIT
  if ("error" in o) {
    // Over the limit the server answers 413 without reading the rest: the upload may break off first.
    return oversized ? undefined : "the connection ended without a response"
  }
  if (o.status >= 500) return `5xx response`
  // Two Authorization lines are refused before anything else, the body's size included.
  const twoAuthorizations = Array.isArray(p.headers["authorization"])
  if (twoAuthorizations && o.status !== 400) return "two Authorization lines were not refused with 400"
  if (oversized && !twoAuthorizations && o.status !== 413) return `a body over ${BODY_LIMIT} bytes was not refused with 413`
  if (o.status >= 400 && p.method !== "HEAD") {
    if (!String(o.headers["content-type"]).toLowerCase().startsWith("application/json")) return "an error without a JSON content type"
    let parsed: unknown
    try {
      parsed = JSON.parse(o.body.toString("utf8"))
    } catch {
      return "an error body that is not JSON"
    }
    if (typeof parsed !== "object" || parsed === null || !("detail" in parsed)) return "an error body without `detail`"
  }
  const correlation = o.headers["x-correlation-id"]
  if (typeof correlation !== "string" || !CORRELATION_ID.test(correlation)) return `X-Correlation-ID missing or malformed: ${String(correlation)}`
  const sent = p.headers["x-correlation-id"]
  if (typeof sent === "string" && CORRELATION_ID.test(sent) && correlation !== sent) return "a valid X-Correlation-ID was not echoed"
  return undefined
}

// ---------------------------------------------------------------------------------------------
// Figures for the summary line

const figures = {
  sent: 0,
  parserLevel: 0,
  statuses: new Map<string, number>(),
  endpoints: new Set<string>(),
  noResponse: 0,
  started: 0,
  auditProbeMs: -1,
  auditDropped: "?"
}
const count = (status: number | string) => figures.statuses.set(String(status), (figures.statuses.get(String(status)) ?? 0) + 1)

const runBatch = async (batch: ReadonlyArray<Probe>) => {
  let next = 0
  let failure: Error | undefined
  const worker = async () => {
    while (failure === undefined && next < batch.length) {
      const p = batch[next++]!
      const o = await send(p)
      figures.sent++
      figures.endpoints.add(p.endpoint)
      if ("error" in o) figures.noResponse++
      else count(o.status)
      const wrong = violation(p, o)
      if (wrong !== undefined && failure === undefined) {
        failure = new Error(`${wrong}\n  request:  ${describeProbe(p)}\n  response: ${describeOutcome(o)}`)
        console.error(`[fuzz.http] property violated: ${failure.message}`)
      }
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker))
  if (failure !== undefined) throw failure
}

// ---------------------------------------------------------------------------------------------
// Generators

interface Fixtures {
  readonly tokens: {
    readonly admin: string
    readonly editor: string
    readonly reader: string
    readonly noRoles: string
    readonly expired: string
    readonly wrongAudience: string
    readonly wrongIssuer: string
    readonly foreignKey: string
    readonly hs256: string
    readonly algNone: string
    readonly tampered: string
  }
  readonly refresh: string
  readonly cursor: string
  readonly adminId: string
}

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url")

/** Characters of a raw request target that node:http sends and the parser accepts (CTLs, space and bytes ≥ 0x80 are the parser-level property's). */
const printable = fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c))
const controlChar = fc.oneof(fc.integer({ min: 0, max: 0x1f }), fc.constant(0x7f)).map((c) => String.fromCharCode(c))
const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c))

/** Percent-escapes that are not UTF-8, NUL, CTLs, truncated and odd escapes. */
const BAD_ESCAPES = [
  "%FF", "%C3%28", "%ED%A0%80", "%ED%BF%BF", "%ED%A0%80%ED%B0%80", "%C0%AF", "%C0%80", "%E0%80%80", "%F4%90%80%80",
  "%F8%88%80%80%80", "%80", "%E2%82", "%FE%FF", "%00", "a%00b", "%00%00", "%", "%z", "%zz", "%E0%A4%A", "%%", "%2", "%25",
  "%2F", "%2f..%2f", "%2e%2e", "%5C", "%0D%0A", "%0A", "%09", "%7F", "%1B%5B31m", "%EF%BB%BF", "%EF%BF%BE", "%EF%BF%BD",
  "%F0%9F%98%80", "%C3%A9", "%E2%80%AE", "%20", "+", "%2B"
]

const SPECIAL_STRINGS = [
  "", " ", " \t ", "\u0000", "a\u0000b", "\ud800", "\udfff", "a\ud800b", "\udc00\ud800", "😀", "\u202e", "\ufeff", "\uffff",
  "\r\n", "\u001b[31m", "\u007f", "\u0085", "\u2028", "null", "undefined", "NaN", "Infinity", "-0", "1e400", "0x10",
  "' OR 1=1 --", "'; DROP TABLE authors; --", "%", "_", "%_%", "\\", "\"", "{{7*7}}", "${7*7}", "../../etc/passwd",
  "<script>alert(1)</script>", "Ada Lovelace", "  Ada Lovelace  ", "ADA LOVELACE"
]

/** Short hostile strings (for paths, queries and headers as well as bodies). */
const shortHostile: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...SPECIAL_STRINGS) },
  { weight: 3, arbitrary: fc.string({ maxLength: 24 }) },
  { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 24 }) },
  { weight: 1, arbitrary: fc.string({ unit: controlChar, minLength: 1, maxLength: 8 }) },
  { weight: 1, arbitrary: fc.tuple(fc.string({ maxLength: 6 }), loneSurrogate, fc.string({ maxLength: 6 })).map((t) => t.join("")) }
)

/** Strings for bodies, including names at and past 255 code points and oversized ones. */
const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 12, arbitrary: shortHostile },
  { weight: 1, arbitrary: fc.integer({ min: 250, max: 260 }).map((n) => "n".repeat(n)) },
  { weight: 1, arbitrary: fc.integer({ min: 250, max: 260 }).map((n) => "😀".repeat(n)) },
  { weight: 1, arbitrary: fc.constantFrom(3_000, 100_000).map((n) => "雨".repeat(n)) }
)

const NUMBERS = [0, -1, 1.5, -0, 2 ** 31, 2 ** 53 + 1, -(2 ** 63), 1e308, -1e308, Number.MIN_VALUE]
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: hostileString },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: fc.constantFrom<unknown>(null, true, false, [], {}, [1], { name: "x" }, ...NUMBERS) },
  { weight: 1, arbitrary: fc.bigInt().map((n) => Number(n)) }
)

const encode = (s: string) => encodeURIComponent(s.toWellFormed())

const NUMERIC_TEXT = ["0", "-1", "1.0", "1e3", "+5", "0x1F", "007", "2147483648", "9223372036854775808", "9".repeat(40), "NaN", "Infinity", "-0", "1_000", "%201"]

/** One piece of a path segment or query value: encoded hostile text, bad escapes, raw printable ASCII, numbers, long runs. */
const urlPiece: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: shortHostile.map(encode) },
  { weight: 4, arbitrary: fc.constantFrom(...BAD_ESCAPES) },
  { weight: 2, arbitrary: fc.string({ unit: printable, maxLength: 12 }) },
  { weight: 3, arbitrary: fc.oneof(fc.integer({ min: -3, max: 40 }).map(String), fc.constantFrom(...NUMERIC_TEXT), fc.bigInt().map(String)) },
  { weight: 1, arbitrary: fc.integer({ min: 300, max: 4_000 }).map((n) => "9".repeat(n)) }
)
const urlText = (valid: fc.Arbitrary<string>) =>
  fc.oneof({ weight: 2, arbitrary: valid }, { weight: 3, arbitrary: fc.array(urlPiece, { minLength: 1, maxLength: 3 }).map((a) => a.join("")) })

const query = (known: Record<string, fc.Arbitrary<string>>) => {
  const names = Object.keys(known)
  const key = fc.oneof(
    { weight: names.length === 0 ? 0 : 5, arbitrary: names.length === 0 ? fc.constant("x") : fc.constantFrom(...names) },
    { weight: 1, arbitrary: urlText(fc.constantFrom("x", "PAGE", "page[]", "__proto__", "constructor", "per_page%00")) }
  )
  const pair = fc.tuple(key, fc.constantFrom("=", "=", "=", "", "=="), fc.nat()).chain(([k, eq, n]) => {
    const valid = Object.hasOwn(known, k) ? known[k]! : fc.constant(String(n % 10))
    return urlText(valid).map((v) => (eq === "" ? k : `${k}${eq}${v}`))
  })
  return fc.oneof(
    { weight: 1, arbitrary: fc.constantFrom("", "?", "?&", "?=", "?&&=&") },
    { weight: 6, arbitrary: fc.array(pair, { minLength: 1, maxLength: 6 }).map((pairs) => `?${pairs.join("&")}`) }
  )
}

/** A raw target: at most 6,000 characters, so the header section stays under Node's 16 KiB. */
const target = (path: fc.Arbitrary<string>, q: fc.Arbitrary<string>) => fc.tuple(path, q).map(([p, s]) => `${p}${s}`.slice(0, 6_000))

/** A header value node:http will send: tab, printable ASCII and bytes 0x80–0xFF (sent as Latin-1). */
const headerText = (s: string) => s.replace(/[^\t\x20-\x7e\x80-\xff]/g, "").slice(0, 2_000)

const deep = (depth: number, object: boolean) => (object ? `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}` : `${"[".repeat(depth)}1${"]".repeat(depth)}`)

/** JSON texts a lenient or careless parser gets wrong, for one field. */
const rawJson = (field: string) =>
  fc.constantFrom(
    `{"${field}":"\\u0000"}`, `{"${field}":"a\\u0000b"}`, `{"${field}":"\\ud800"}`, `{"${field}":"a\\udfffb"}`, `{"${field}":"\\udc00\\ud800"}`,
    `{"${field}":1e400}`, `{"${field}":-1e400}`, `{"${field}":${"9".repeat(400)}}`, `{"${field}":0.${"0".repeat(400)}1}`,
    `{"${field}":"a","${field}":"b"}`, `{"${field}":"x"`, `{"${field}":}`, `{${field}:"x"}`, `{"${field}":"x",}`, `{"${field}":'x'}`,
    `\ufeff{"${field}":"x"}`, `{"${field}":"\\x41"}`, `{"${field}":"\\u12"}`, `[{"${field}":"x"}]`, `"${field}"`, "null", "true", "0", "",
    " ", `{"__proto__":{"${field}":"x"}}`, `{"constructor":{"prototype":{"${field}":1}}}`, `{"${field}":"\u0001\u001f"}`, "{}",
    `{"${field}":NaN}`, `{"${field}":Infinity}`, `{"${field}":[${"1,".repeat(5000)}1]}`
  )

const invalidUtf8Body = (field: string) =>
  fc.constantFrom([0xff], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0xf4, 0x90, 0x80, 0x80], [0x80]).map((bytes) =>
    Buffer.concat([Buffer.from(`{"${field}":"`), Buffer.from(bytes), Buffer.from('"}')])
  )

const DEEP_BODIES = [65, 1_000, 20_000].flatMap((d) => [deep(d, false), deep(d, true)])

/** A body: a JSON object built from `fields` (the usual case), raw JSON oddities, deep nesting, bad UTF-8, junk, or more than the limit. */
const body = (fields: Record<string, fc.Arbitrary<unknown>>, field: string) =>
  fc.oneof(
    { weight: 120, arbitrary: fc.record({ ...fields, extra: hostileValue }, { requiredKeys: [] }).map((v) => Buffer.from(JSON.stringify(v))) },
    { weight: 30, arbitrary: rawJson(field).map((s) => Buffer.from(s)) },
    { weight: 15, arbitrary: fc.tuple(fc.constantFrom(...DEEP_BODIES), fc.boolean()).map(([d, inField]) => Buffer.from(inField ? `{"${field}":${d}}` : d)) },
    { weight: 10, arbitrary: invalidUtf8Body(field) },
    { weight: 10, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => Buffer.from(JSON.stringify(v) ?? "null")) },
    { weight: 10, arbitrary: shortHostile.map((s) => Buffer.from(s)) },
    { weight: 5, arbitrary: fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)) },
    { weight: 2, arbitrary: fc.constantFrom(BODY_LIMIT + 1, BODY_LIMIT + 65_536).map((n) => Buffer.from(`{"${field}":"${"x".repeat(n)}"}`)) }
  )

/** POST /api/profiling/reports bodies that are never a valid capture request (a valid one samples the CPU for seconds). */
const captureBody = fc.oneof(
  {
    weight: 30,
    arbitrary: fc.record({
      seconds: fc.constantFrom<unknown>(0, 61, -1, 1.5, 2 ** 31, 1e308, -1e308, "1", "", "\u0000", true, [], {}, [1], { seconds: 1 }),
      extra: hostileValue
    }, { requiredKeys: ["seconds"] }).map((v) => Buffer.from(JSON.stringify(v)))
  },
  {
    weight: 10,
    arbitrary: fc.constantFrom(
      '{"seconds":1e400}', '{"seconds":-1e400}', '{"seconds":"\\u0000"}', '{"seconds":"\\ud800"}', '{"seconds":', "[]", "null", '"x"', "1",
      '{"seconds":NaN}', `{"seconds":${"9".repeat(400)}}`
    ).map((s) => Buffer.from(s))
  },
  // Nesting only where it makes the payload invalid: extra keys are ignored, so `{"a":{…}}` would be a capture.
  { weight: 5, arbitrary: fc.constantFrom(...DEEP_BODIES).map((d) => Buffer.from(d.startsWith("[") ? d : `{"seconds":${d}}`)) },
  { weight: 5, arbitrary: invalidUtf8Body("seconds") },
  { weight: 1, arbitrary: fc.constant(BODY_LIMIT + 1).map((n) => Buffer.from(`{"seconds":"${"x".repeat(n)}"}`)) }
)

const CONTENT_TYPES = [
  "application/json; charset=utf-8", "APPLICATION/JSON", "application/json; charset=latin1", "application/json;charset=utf-16",
  "application/jsonx", "text/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
  "multipart/form-data", "application/octet-stream", "application/xml", "*/*", "", ";", "application/json, text/plain"
]

const build = (f: Fixtures) => {
  const t = f.tokens
  const bearer = (token: string) => `Bearer ${token}`
  const authorization = fc.oneof(
    { weight: 10, arbitrary: fc.constantFrom(bearer(t.admin), bearer(t.editor), bearer(t.reader)) },
    { weight: 2, arbitrary: fc.constant(undefined) },
    {
      weight: 4,
      arbitrary: fc.constantFrom(
        bearer(t.noRoles), bearer(t.expired), bearer(t.wrongAudience), bearer(t.wrongIssuer), bearer(t.foreignKey), bearer(t.hs256),
        bearer(t.algNone), bearer(t.tampered), bearer(f.refresh), `Basic ${Buffer.from("admin:admin").toString("base64")}`, "Bearer",
        "Bearer ", `bearer ${t.admin}`, `BEARER ${t.reader}`, `Bearer  ${t.admin}`, `Bearer ${t.admin} extra`, `Bearer ${t.admin.slice(0, -4)}`,
        `Bearer ${t.admin}x`, `Token ${t.admin}`, t.admin, `Bearer ${"A".repeat(1_500)}.${"B".repeat(200)}.x`, "Bearer a.b.c", "Bearer ...",
        "Bearer \xff\xfe", "Digest username=x", "Negotiate YII=", "Bearer e30.e30.e30", ""
      )
    },
    { weight: 1, arbitrary: fc.tuple(fc.boolean(), shortHostile).map(([scheme, s]) => headerText(scheme ? `Bearer ${s}` : s)) },
    { weight: 1, arbitrary: fc.constant([bearer(t.reader), bearer(t.admin)]) }
  )
  const optional = <A>(arb: fc.Arbitrary<A>, weight = 1) => fc.option(arb, { freq: weight, nil: undefined })
  const correlation = optional(fc.oneof(
    fc.stringMatching(/^[A-Za-z0-9._-]{1,64}$/),
    fc.constantFrom("a".repeat(65), "", "bad id!", "\xe9\xff", "x".repeat(2_000), "../../x", "a,b", "%00"),
    fc.constant(["first-id", "second-id"]),
    shortHostile.map(headerText)
  ), 2)
  const forwardedFor = optional(fc.oneof(
    fc.constantFrom("1.2.3.4", "1.2.3.4, 5.6.7.8", "::ffff:10.0.0.1", "2001:db8::1", "garbage", "999.1.1.1", "", ",,,", " , ",
      "1.2.3.4:80", "[::1]", "a".repeat(2_000), "\xff\xfe", "127.0.0.1, 127.0.0.1"),
    fc.ipV4(),
    fc.ipV6(),
    fc.array(fc.oneof(fc.ipV4(), fc.ipV4Extended(), shortHostile.map(headerText)), { maxLength: 30 }).map((a) => a.join(", ").slice(0, 2_000))
  ), 2)
  const userAgent = optional(fc.oneof(shortHostile.map(headerText), fc.constantFrom("x".repeat(2_000), "\xff\xfe\xfd", "curl/8")), 4)
  const contentType = fc.oneof(
    { weight: 8, arbitrary: fc.constant<string | undefined>("application/json") },
    { weight: 3, arbitrary: fc.constantFrom(...CONTENT_TYPES) },
    { weight: 1, arbitrary: shortHostile.map(headerText) },
    { weight: 1, arbitrary: fc.constant(undefined) }
  )

  const make = (
    endpoint: string,
    method: fc.Arbitrary<string>,
    tgt: fc.Arbitrary<string>,
    payload?: fc.Arbitrary<Buffer>
  ): fc.Arbitrary<Probe> =>
    fc.record({
      method,
      target: tgt,
      auth: authorization,
      correlation,
      forwardedFor,
      userAgent,
      contentType,
      body: payload ?? fc.oneof(
        { weight: 19, arbitrary: fc.constant(undefined) },
        { weight: 1, arbitrary: fc.constant(Buffer.from('{"name":"a body on a bodiless request"}')) }
      ),
      chunked: fc.boolean()
    }).map((r) => {
      const headers: Record<string, HeaderValue> = {}
      if (r.auth !== undefined) headers["authorization"] = r.auth
      if (r.correlation !== undefined) headers["x-correlation-id"] = r.correlation
      if (r.forwardedFor !== undefined) headers["x-forwarded-for"] = r.forwardedFor
      if (r.userAgent !== undefined) headers["user-agent"] = r.userAgent
      const body = r.method === "HEAD" ? undefined : r.body
      if (body !== undefined && r.contentType !== undefined) headers["content-type"] = r.contentType
      return withToString({ endpoint, method: r.method, target: r.target, headers, body, chunked: r.chunked })
    })

  const ids = fc.integer({ min: 1, max: 40 }).map(String)
  const pageNumber = fc.oneof(fc.integer({ min: 1, max: 5 }).map(String), fc.constantFrom("1", "100000"))
  const names = fc.constantFrom("Ada%20Lovelace", "Fuzz%20Seed%200", "Fuzz%20Seed%201", "fuzz%20seed%201")
  const cursors = fc.constantFrom(f.cursor, f.cursor.slice(0, -2), `${f.cursor}A`, f.cursor.toUpperCase(), encode(f.cursor.split("").reverse().join("")))
  const dates = fc.constantFrom("2026-01-01", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00%2B02:00", "2026-02-30", "0001-01-01",
    "275760-09-13", "-000001-01-01", "2026-01-01T25:00:00", "1700000000", "today")
  const seg = (valid: fc.Arbitrary<string>) => urlText(valid)
  const GET = fc.constant("GET")

  const authorName = fc.oneof(
    fc.constantFrom(...Array.from({ length: 30 }, (_, i) => `Fuzz Seed ${i}`)),
    fc.string({ minLength: 1, maxLength: 40 }).map((s) => `Fuzz ${s}`),
    hostileValue
  )
  const authorBody = body({ name: authorName }, "name")
  const loginBody = body({
    username: fc.oneof(fc.constantFrom("admin", "editor", "reader", "nobody", "", "ADMIN", "admin\u0000"), hostileValue),
    password: fc.oneof(fc.constantFrom("admin", "editor", "wrong", ""), hostileValue)
  }, "username")
  const refreshBody = body({ refresh_token: fc.oneof(fc.constantFrom(f.refresh, t.admin, f.refresh.slice(0, -3), `Bearer ${f.refresh}`), hostileValue) }, "refresh_token")
  const reportName = seg(fc.constantFrom("profile-20260101T000000000Z-abcd.html", "a.html", ".html", "-a.html", "x.HTML", "a.html.html",
    "..%2F..%2Fetc%2Fpasswd", "%2e%2e%2Fa.html", "a%00.html", "a%2Fb.html", "con.html", "a".repeat(300) + ".html"))
  const opsPath = fc.constantFrom("/health", "/livez", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/asyncapi.json", "/proto/websocket.proto")
  const knownPath = fc.constantFrom("/authors", "/authors/paginated", "/authors/1", "/audit-logs", "/audit-logs/1", "/audit-logs/user/x",
    "/login", "/login/refresh", "/api/profiling/status", "/api/profiling/reports", "/api/profiling/reports/a.html", "/health", "/livez",
    "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/asyncapi.json", "/proto/websocket.proto", "/web")
  const unknownPath = fc.oneof(
    fc.constantFrom("/", "*", "/AUTHORS", "/authors/", "/authors//1", "//authors", "/authors/1/2", "/authors/paginated/1", "/api/authors",
      "/audit-logs/user", "/audit-logs/user/", "/audit-logs/1/2", "/api/profiling", "/api/profiling/reports/", "/./authors", "/authors/./1",
      "/authors/%2e%2e/audit-logs", "/favicon.ico", "/.env", "/docs/../openapi.json", "/openapi.json/", "http://127.0.0.1/authors",
      "http://evil.example/audit-logs", "/web/x", "/proto/", "/metrics/", "/%2e%2e/%2e%2e/etc/passwd", "/authors%2F1", "/%00"),
    fc.array(urlPiece, { minLength: 1, maxLength: 4 }).map((a) => `/${a.join("/")}`)
  )
  const anyMethod = fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE")

  return fc.oneof(
    { weight: 9, arbitrary: make("GET /authors", GET, target(fc.constant("/authors"), query({ id: ids, name: names, search: fc.constantFrom("a", "ada", "%25", "_") }))) },
    {
      weight: 9,
      arbitrary: make("GET /authors/paginated", GET,
        target(fc.constant("/authors/paginated"), query({ page: pageNumber, per_page: fc.constantFrom("1", "10", "1000", "1001"), id: ids, name: names, cursor: cursors })))
    },
    { weight: 7, arbitrary: make("POST /authors", fc.constant("POST"), target(fc.constant("/authors"), query({})), authorBody) },
    { weight: 6, arbitrary: make("PUT /authors/{id}", fc.constant("PUT"), target(seg(ids).map((s) => `/authors/${s}`), fc.constant("")), authorBody) },
    { weight: 5, arbitrary: make("DELETE /authors/{id}", fc.constant("DELETE"), target(seg(ids).map((s) => `/authors/${s}`), query({}))) },
    {
      weight: 7,
      arbitrary: make("GET /audit-logs", GET, target(fc.constant("/audit-logs"), query({
        page: pageNumber, per_page: fc.constantFrom("1", "50", "100", "101", "0"), user_id: fc.constantFrom(f.adminId, "fuzz-user"),
        username: fc.constantFrom("admin", "reader"), action_type: fc.constantFrom("GET", "POST", "WS%3AGET_AUTHORS"),
        resource: fc.constantFrom("%2Fauthors", "/authors"), outcome: fc.constantFrom("success", "error", "permission_denied", "bogus"),
        start_date: dates, end_date: dates
      })))
    },
    { weight: 4, arbitrary: make("GET /audit-logs/{log_id}", GET, target(seg(ids).map((s) => `/audit-logs/${s}`), query({}))) },
    {
      weight: 5,
      arbitrary: make("GET /audit-logs/user/{user_id}", GET,
        target(seg(fc.constantFrom(f.adminId, "fuzz-user", "admin")).map((s) => `/audit-logs/user/${s}`), query({ page: pageNumber, per_page: fc.constantFrom("1", "100", "101") })))
    },
    { weight: 4, arbitrary: make("POST /login", fc.constant("POST"), target(fc.constant("/login"), query({})), loginBody) },
    { weight: 3, arbitrary: make("POST /login/refresh", fc.constant("POST"), target(fc.constant("/login/refresh"), query({})), refreshBody) },
    { weight: 2, arbitrary: make("GET /api/profiling/status", GET, target(fc.constant("/api/profiling/status"), query({}))) },
    { weight: 2, arbitrary: make("GET /api/profiling/reports", GET, target(fc.constant("/api/profiling/reports"), query({}))) },
    { weight: 3, arbitrary: make("POST /api/profiling/reports", fc.constant("POST"), target(fc.constant("/api/profiling/reports"), query({})), captureBody) },
    { weight: 3, arbitrary: make("GET /api/profiling/reports/{filename}", GET, target(reportName.map((s) => `/api/profiling/reports/${s}`), query({}))) },
    { weight: 2, arbitrary: make("DELETE /api/profiling/reports/{filename}", fc.constant("DELETE"), target(reportName.map((s) => `/api/profiling/reports/${s}`), query({}))) },
    { weight: 10, arbitrary: make("probes, metrics and docs", fc.constantFrom("GET", "GET", "GET", "HEAD"), target(opsPath, query({ format: fc.constant("json") }))) },
    { weight: 5, arbitrary: make("unknown path", anyMethod, target(unknownPath, query({}))) },
    { weight: 4, arbitrary: make("known path, any method", anyMethod, target(knownPath, query({}))) }
  )
}

// ---------------------------------------------------------------------------------------------
// Requests the HTTP parser refuses, sent on a raw socket

interface RawProbe {
  readonly what: string
  readonly bytes: Buffer
}

const latin1 = (b: Buffer | string) => (typeof b === "string" ? Buffer.from(b, "latin1") : b)

const rawRequest = (requestLine: Buffer | string, headerLines: ReadonlyArray<Buffer | string> = []) =>
  Buffer.concat([
    latin1(requestLine),
    Buffer.from("\r\nHost: 127.0.0.1\r\nConnection: close\r\n"),
    ...headerLines.map((h) => Buffer.concat([latin1(h), Buffer.from("\r\n")])),
    Buffer.from("\r\n")
  ])

const rawProbe = (what: string, bytes: Buffer): RawProbe => Object.assign({ what, bytes }, { [fc.toStringMethod]: () => `${what}: ${clip(JSON.stringify(bytes.toString("latin1")), 240)}` })

const parserLevel: fc.Arbitrary<RawProbe> = fc.oneof(
  // Bytes ≥ 0x80 (raw, not percent-escaped) in the request target.
  fc.tuple(fc.constantFrom("/authors?search=", "/authors/", "/audit-logs/user/", "/api/profiling/reports/", "/health?x=", "/"),
    fc.uint8Array({ minLength: 1, maxLength: 8 }).map((a) => Buffer.from(a.map((b) => b | 0x80)))).map(([prefix, bytes]) =>
    rawProbe("raw non-ASCII bytes in the request target", rawRequest(Buffer.concat([Buffer.from(`GET ${prefix}`), bytes, Buffer.from(" HTTP/1.1")])))),
  // Control characters (NUL included) in the target.
  fc.tuple(fc.constantFrom("/authors?search=", "/authors/"), controlChar.filter((c) => c !== "\r" && c !== "\n")).map(([prefix, c]) =>
    rawProbe("a raw control character in the request target", rawRequest(`GET ${prefix}a${c}b HTTP/1.1`))),
  // Control characters (NUL included) in a header value.
  fc.tuple(fc.constantFrom("X-Correlation-ID", "User-Agent", "X-Forwarded-For", "Authorization"), controlChar.filter((c) => c !== "\r" && c !== "\n" && c !== "\t"))
    .map(([name, c]) => rawProbe("a control character in a header value", rawRequest("GET /authors HTTP/1.1", [`${name}: a${c}b`]))),
  // A header section over Node's 16 KiB limit (431).
  fc.integer({ min: 16_400, max: 40_000 }).map((n) => rawProbe("a request target over 16 KiB", rawRequest(`GET /authors?search=${"a".repeat(n)} HTTP/1.1`))),
  fc.integer({ min: 16_400, max: 40_000 }).map((n) => rawProbe("a header over 16 KiB", rawRequest("GET /health HTTP/1.1", [`X-Big: ${"a".repeat(n)}`]))),
  // Malformed request lines and headers.
  fc.constantFrom(
    rawProbe("an unknown method", rawRequest("FOO /authors HTTP/1.1")),
    rawProbe("a lower-case method", rawRequest("get /authors HTTP/1.1")),
    rawProbe("a space in the target", rawRequest("GET /authors?search=a b HTTP/1.1")),
    rawProbe("an unknown HTTP version", rawRequest("GET /authors HTTP/9.9")),
    rawProbe("a header name with a space", rawRequest("GET /authors HTTP/1.1", ["X Bad: 1"])),
    rawProbe("a header line without a colon", rawRequest("GET /authors HTTP/1.1", ["NoColonHere"])),
    rawProbe("an invalid Content-Length", rawRequest("POST /authors HTTP/1.1", ["Content-Length: abc"])),
    rawProbe("two different Content-Lengths", rawRequest("POST /authors HTTP/1.1", ["Content-Length: 1", "Content-Length: 2"])),
    rawProbe("Content-Length with Transfer-Encoding", rawRequest("POST /login HTTP/1.1", ["Content-Length: 4", "Transfer-Encoding: chunked"])),
    rawProbe("a malformed chunk", Buffer.concat([rawRequest("POST /login HTTP/1.1", ["Transfer-Encoding: chunked", "Content-Type: application/json"]), Buffer.from("zz\r\n{}\r\n0\r\n\r\n")]))
  )
)

/** Writes the bytes, reads until the server closes (every request says `Connection: close`). */
const sendRaw = (bytes: Buffer) =>
  new Promise<Outcome>((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    const chunks: Array<Buffer> = []
    socket.on("data", (c) => chunks.push(c))
    socket.on("error", () => {}) // a reset after the answer: judged on what arrived
    socket.on("close", () => {
      const raw = Buffer.concat(chunks)
      const end = raw.indexOf("\r\n\r\n")
      const head = (end === -1 ? raw : raw.subarray(0, end)).toString("latin1").split("\r\n")
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? "")
      if (status === null) return resolve({ error: `no status line (${raw.length} bytes received)` })
      const headers: http.IncomingHttpHeaders = {}
      for (const line of head.slice(1)) {
        const colon = line.indexOf(":")
        if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
      }
      let body = end === -1 ? Buffer.alloc(0) : raw.subarray(end + 4)
      if (String(headers["transfer-encoding"]).toLowerCase() === "chunked") body = dechunk(body)
      resolve({ status: Number(status[1]), headers, body })
    })
    socket.write(bytes)
  })

const dechunk = (body: Buffer) => {
  const parts: Array<Buffer> = []
  let at = 0
  while (at < body.length) {
    const eol = body.indexOf("\r\n", at)
    if (eol === -1) break
    const size = parseInt(body.subarray(at, eol).toString("latin1"), 16)
    if (!(size > 0)) break
    parts.push(body.subarray(eol + 2, eol + 2 + size))
    at = eol + 2 + size + 2
  }
  return Buffer.concat(parts)
}

/** A 4xx (never a 5xx) whose body is JSON with `detail`. */
const parserLevelViolation = (o: Outcome): string | undefined => {
  if ("error" in o) return `no HTTP response: ${o.error}`
  if (o.status >= 500) return "5xx response"
  if (o.status < 400) return undefined
  try {
    const parsed: unknown = JSON.parse(o.body.toString("utf8"))
    return typeof parsed === "object" && parsed !== null && "detail" in parsed ? undefined : "an error body without `detail`"
  } catch {
    return "an error body that is not JSON"
  }
}

// ---------------------------------------------------------------------------------------------

let fixtures: Fixtures

beforeAll(async () => {
  app = await startTestApp({
    config: {
      rateLimitEnabled: false,
      maxRequestBodyBytes: BODY_LIMIT,
      // X-Forwarded-For is believed from loopback, so its parsing is on the path of every request.
      trustedProxies: ["127.0.0.1/32", "::1/128"].map((c) => parseCidr(c)!)
    }
  })
  port = Number(new URL(app.url).port)
  agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT })
  const adminLogin = await login(app, "admin")
  const adminId = "00000000-0000-4000-8000-000000000001"
  admin = await signToken(app, { sub: adminId, preferred_username: "admin", roles: ADMIN_ROLES }, { expiresIn: "30m" })
  const foreign = await generateKeyPair("ES256")
  const [header, payload] = admin.split(".") as [string, string]
  const tokens = {
    admin,
    editor: await signToken(app, { sub: "00000000-0000-4000-8000-000000000002", preferred_username: "editor", roles: ADMIN_ROLES.slice(1) }, { expiresIn: "30m" }),
    reader: await signToken(app, { sub: "00000000-0000-4000-8000-000000000003", preferred_username: "reader", roles: ["user", "get-authors"] }, { expiresIn: "30m" }),
    noRoles: await signToken(app, { sub: "fuzz-no-roles", roles: [] }, { expiresIn: "30m" }),
    expired: await signToken(app, { sub: "fuzz-expired", roles: ADMIN_ROLES }, { expiresIn: Math.floor(Date.now() / 1000) - 60 }),
    wrongAudience: await signToken(app, { sub: "fuzz-aud", roles: ADMIN_ROLES }, { audience: "someone-else" }),
    wrongIssuer: await signToken(app, { sub: "fuzz-iss", roles: ADMIN_ROLES }, { issuer: "https://evil.example" }),
    foreignKey: await new SignJWT({ typ: "Bearer", roles: ADMIN_ROLES }).setProtectedHeader({ alg: "ES256", kid: JSON.parse(Buffer.from(header, "base64url").toString()).kid })
      .setSubject("fuzz-foreign").setIssuedAt().setExpirationTime("30m").sign(foreign.privateKey),
    hs256: await new SignJWT({ typ: "Bearer", roles: ADMIN_ROLES }).setProtectedHeader({ alg: "HS256" }).setSubject("fuzz-hs")
      .setIssuedAt().setExpirationTime("30m").sign(new TextEncoder().encode("a-shared-secret-of-32-bytes-long!")),
    algNone: `${b64url({ alg: "none", typ: "JWT" })}.${payload}.`,
    tampered: `${header}.${b64url({ ...JSON.parse(Buffer.from(payload, "base64url").toString()), sub: "someone-else" })}.${admin.split(".")[2]}`
  }
  for (let i = 0; i < 5; i++) {
    const created = await request(app, "POST", "/authors", { token: admin, body: { name: `Fuzz Seed ${i}` } })
    expect(created.status).toBe(201)
  }
  const page = await request(app, "GET", "/authors/paginated?per_page=1", { token: admin })
  const cursor = (page.body as { meta: { next_cursor: string | null } }).meta.next_cursor
  expect(cursor).toBeTypeOf("string")
  fixtures = { tokens, refresh: adminLogin.refresh_token, cursor: cursor!, adminId }
  figures.started = performance.now()
})

afterAll(async () => {
  const statuses = Object.fromEntries([...figures.statuses.entries()].sort(([a], [b]) => a.localeCompare(b)))
  console.log(
    `[fuzz.http] requests=${figures.sent + figures.parserLevel} (generated ${figures.sent} over ${figures.endpoints.size} kinds of request, ${IN_FLIGHT} in flight; parser-level ${figures.parserLevel})` +
      ` statuses=${JSON.stringify(statuses)} no_response=${figures.noResponse}` +
      ` duration=${((performance.now() - figures.started) / 1000).toFixed(1)}s audit_probe_stored_after=${Math.round(figures.auditProbeMs)}ms` +
      ` audit_records_dropped_total=${figures.auditDropped}`
  )
  agent?.destroy()
  await app?.close()
})

describe("HTTP fault fuzzing (generated requests, every endpoint)", () => {
  it(`${REQUESTS}+ requests, ${IN_FLIGHT} in flight: never a 5xx, every error is JSON with detail, X-Correlation-ID always valid, bodies over the limit are 413`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(build(fixtures), { minLength: BATCH, maxLength: BATCH }), runBatch),
      // Each run is a batch; a violation reports its own request, so no shrinking over batches.
      { numRuns: Math.ceil(REQUESTS / BATCH), endOnFailure: true }
    )
    expect(figures.sent).toBeGreaterThanOrEqual(REQUESTS)
    expect(figures.endpoints.size, "every kind of request was generated").toBe(ENDPOINT_KINDS)
  }, 180_000)

  it("requests the HTTP parser refuses (raw non-ASCII or control bytes, over 16 KiB of headers, malformed framing) still get a 4xx whose body is JSON with detail", async () => {
    let reported = false
    await fc.assert(
      fc.asyncProperty(parserLevel, async (p) => {
        const o = await sendRaw(p.bytes)
        figures.parserLevel++
        count("error" in o ? "no response" : o.status)
        const wrong = parserLevelViolation(o)
        if (wrong !== undefined && !reported) console.error(`[fuzz.http] parser-level property violated: ${wrong}\n  request:  ${p.what}\n  response: ${describeOutcome(o)}`)
        reported ||= wrong !== undefined
        expect(wrong, `${p.what} → ${describeOutcome(o)}`).toBeUndefined()
      }),
      { numRuns: 60 }
    )
  })

  it("afterwards the audit trail still advances: a new authenticated request's record is stored", async () => {
    figures.auditDropped = String((await scrapeMetrics(app.url)).sum("audit_records_dropped_total"))

    const probeUser = `fuzz-http-probe-${randomUUID()}`
    const token = await signToken(app, { sub: probeUser, roles: ["get-authors"] })
    const started = performance.now()
    const res = await request(app, "GET", "/authors?search=audit-probe", { token })
    expect(res.status).toBe(200)
    const requestId = res.headers.get("x-request-id")
    expect(requestId).toMatch(/^[0-9a-f-]{36}$/)
    const record = await awaitAuditRecord(app, admin, requestId!, `&user_id=${probeUser}`)
    figures.auditProbeMs = performance.now() - started
    expect(record).toMatchObject({ user_id: probeUser, action_type: "GET", resource: "/authors", response_status: 200, outcome: "success" })
  })
})
