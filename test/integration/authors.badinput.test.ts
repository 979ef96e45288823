/**
 * Bad input, generated: every malformed request to the authors endpoints, /login and
 * /login/refresh gets a 4xx JSON error with `detail`, never a 500
 * (docs/errors-and-limits.md#http-errors).
 */
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { eventually } from "../support/Eventually.ts"
import { login, startTestApp, type TestApp } from "../support/TestApp.ts"

let app: TestApp
let token: string

beforeAll(async () => {
  app = await startTestApp({ config: { rateLimitEnabled: false } })
  token = (await login(app, "admin")).access_token
})
afterAll(() => app.close())

const RUNS = 60

interface Outcome {
  readonly status: number
  readonly body: unknown
}

const send = async (method: string, path: string, init: { body?: string; contentType?: string; auth?: boolean } = {}): Promise<Outcome> => {
  const headers: Record<string, string> = {}
  if (init.auth !== false) headers["authorization"] = `Bearer ${token}`
  if (init.contentType !== undefined) headers["content-type"] = init.contentType
  const res = await fetch(`${app.url}${path}`, { method, headers, ...(init.body !== undefined ? { body: init.body } : {}) })
  const text = await res.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {
    // asserted below
  }
  return { status: res.status, body }
}

/** Success, or a 4xx whose JSON body has `detail`; never a 5xx. */
const expectHandled = (outcome: Outcome, what: string) => {
  expect(outcome.status, what).toBeLessThan(500)
  if (outcome.status >= 400) {
    expect(outcome.body, what).toBeTypeOf("object")
    expect(outcome.body, what).toHaveProperty("detail")
  }
}

/** Strings likely to break parsers: numbers in odd notations, escapes, NUL, huge, unicode. */
const nasty = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary" }),
  fc.constantFrom("", " ", "-1", "0", "1e3", "0x10", "1.0", "+5", "9".repeat(30), "NaN", "Infinity", "null", "\u0000", "%", "%zz",
    "%E0%A4%A", "' OR 1=1 --", "\\", "_", "%_%", "😀", "\ud800", "a".repeat(2000)),
  fc.integer().map(String),
  fc.bigInt().map(String)
)

/** encodeURIComponent refuses lone surrogates; send U+FFFD for them, as a browser would. */
const encode = (s: string) => {
  try {
    return encodeURIComponent(s)
  } catch {
    return encodeURIComponent(s.replace(/[\ud800-\udfff]/g, "\ufffd"))
  }
}

/** Encodes most values, but sometimes sends them raw (malformed percent-encoding included). */
const queryValue = fc.tuple(nasty, fc.boolean()).map(([v, raw]) => raw ? v.replace(/[#&\s]/g, "") : encode(v))
const queryKey = fc.oneof(fc.constantFrom("id", "name", "search", "page", "per_page", "cursor"), fc.string().map(encode))
const query = fc.array(fc.tuple(queryKey, queryValue), { maxLength: 5 }).map((pairs) => pairs.map(([k, v]) => `${k}=${v}`).join("&"))

const jsonBody = fc.oneof(
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc.record({ name: fc.oneof(fc.jsonValue(), nasty) }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
  fc.record({ username: fc.oneof(fc.jsonValue(), nasty), password: fc.oneof(fc.jsonValue(), nasty) }, { requiredKeys: [] })
    .map((v) => JSON.stringify(v)),
  fc.record({ refresh_token: fc.oneof(fc.jsonValue(), nasty) }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
  nasty
)
const contentType = fc.oneof(
  fc.constant("application/json"),
  fc.constantFrom("application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "multipart/form-data", "application/octet-stream", "application/xml", "", "*/*"),
  fc.string().map((s) => s.replace(/[^\x20-\x7e]/g, ""))
)
const pathSegment = fc.oneof(nasty.map(encode), nasty.map((s) => s.replace(/[/?#\s]/g, "")).filter((s) => s !== ""))

describe("requests PostgreSQL cannot store verbatim", () => {
  it("NUL and unpaired surrogates in query and body are still audited, and nothing blocks", async () => {
    const marker = `nul-${Date.now()}`
    expectHandled(await send("GET", `/authors?search=${marker}%00`), "NUL query")
    expectHandled(await send("POST", "/authors", { body: `{"name":"${marker}\\ud800","x\\u0000":1}`, contentType: "application/json" }), "surrogate")
    await eventually(async () => {
      const res = await send("GET", "/audit-logs?per_page=100")
      const items = (res.body as { items?: Array<{ resource: string; action_type: string }> }).items ?? []
      expect(items.filter((i) => i.resource === "/authors" && ["GET", "POST"].includes(i.action_type)).length).toBeGreaterThanOrEqual(2)
    }, "the two requests' audit records")
  })
})

describe("deeply nested JSON bodies", () => {
  it("a value nested thousands of levels deep is a 422 naming the limit; nested extras are ignored", async () => {
    for (const deep of [`${"[".repeat(20_000)}1${"]".repeat(20_000)}`, `${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}`]) {
      for (const [method, path] of [["POST", "/authors"], ["PUT", "/authors/1"], ["POST", "/login"]] as const) {
        const res = await send(method, path, { body: `{"name":${deep},"username":${deep}}`, contentType: "application/json" })
        expect(res.status, `${method} ${path}`).toBe(422)
        expect(res.body).toEqual({ detail: [{ type: "value_error", loc: ["body"], msg: "Input is nested more than 64 levels deep", input: null }] })
      }
    }
    const shallow = await send("POST", "/authors", { body: `{"name":"Deep extra ${Date.now()}","x":${"[".repeat(50)}${"]".repeat(50)}}`, contentType: "application/json" })
    expect(shallow.status).toBe(201)
  })
})

describe("generated bad input never yields a 500", () => {
  it("GET /authors and /authors/paginated with any query", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("/authors", "/authors/paginated"), query, async (path, q) => {
        expectHandled(await send("GET", `${path}?${q}`), `${path}?${q}`)
      }),
      { numRuns: RUNS * 2 }
    )
  })

  it("PUT and DELETE /authors/{author_id} with any path segment", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("PUT", "DELETE"), pathSegment, async (method, segment) => {
        const init = method === "PUT" ? { body: JSON.stringify({ name: "Path Fuzz" }), contentType: "application/json" } : {}
        expectHandled(await send(method, `/authors/${segment}`, init), `${method} /authors/${segment}`)
      }),
      { numRuns: RUNS * 2 }
    )
  })

  it("POST /authors and PUT /authors/{id} with any body and content type", async () => {
    const created = await send("POST", "/authors", { body: JSON.stringify({ name: "Body Fuzz Target" }), contentType: "application/json" })
    const id = (created.body as { id: number }).id
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("POST /authors", `PUT /authors/${id}`), jsonBody, contentType, async (target, body, ct) => {
        const [method, path] = target.split(" ") as [string, string]
        expectHandled(await send(method, path, { body, contentType: ct }), `${target} ${ct} ${body.slice(0, 80)}`)
      }),
      { numRuns: RUNS * 3 }
    )
  })

  it("POST /login and /login/refresh with any body and content type", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("/login", "/login/refresh"), jsonBody, contentType, async (path, body, ct) => {
        const outcome = await send("POST", path, { body, contentType: ct, auth: false })
        expectHandled(outcome, `${path} ${ct} ${body.slice(0, 80)}`)
      }),
      { numRuns: RUNS * 3 }
    )
  })

  it("any Authorization header on a protected endpoint is 200 or 401, never 500", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(nasty, nasty.map((s) => `Bearer ${s}`), fc.constantFrom("Bearer", "bearer x.y.z", "Bearer a.b.c", "Bearer eyJhbGciOiJub25lIn0.e30.")),
        async (header) => {
          const value = header.replace(/[^\x20-\x7e]/g, "").trim()
          const res = await fetch(`${app.url}/authors`, { headers: { authorization: value } })
          expect(res.status, value).toBe(401)
          expect(await res.json()).toHaveProperty("detail")
        }
      ),
      { numRuns: RUNS }
    )
  })
})
