/**
 * Docs (docs/operations.md#api-documentation): /openapi.json is a valid OpenAPI 3.1 document describing every endpoint's
 * errors, its parameters as what they decode to, the bearer scheme and the password flow against
 * /login; /docs (Swagger UI) and /redoc render the operations in a real headless Chromium with no
 * internet access, and Swagger UI's "Authorize" logs in with a username and password.
 */
import { createConfig, lintFromString } from "@redocly/openapi-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Browser, hasChromium, launchChromium } from "../support/Browser.ts"
import { AUTHORS_MAX_PER_PAGE, INT32_MAX, MAX_PAGE } from "../../src/Domain/Pagination.ts"
import { Packages } from "../../src/Ws/Packages.ts"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"

type Json = Record<string, unknown>

let app: TestApp
let doc: Json

beforeAll(async () => {
  app = await startTestApp({ config: { rateLimitEnabled: false } })
  doc = await (await fetch(`${app.url}/openapi.json`)).json() as Json
})
afterAll(() => app.close())

const METHODS = ["get", "put", "post", "delete", "patch", "options", "head", "trace"]
const operations = () =>
  Object.entries(doc["paths"] as Record<string, Json>).flatMap(([path, item]) =>
    Object.entries(item).filter(([m]) => METHODS.includes(m)).map(([method, op]) => ({ path, method, op: op as Json }))
  )
const op = (method: string, path: string) => {
  const found = operations().find((o) => o.method === method && o.path === path)
  if (found === undefined) throw new Error(`no ${method} ${path}`)
  return found.op
}
const statuses = (o: Json) => Object.keys(o["responses"] as Json)

describe("/openapi.json", () => {
  it("is OpenAPI 3.1 with info, paths and the bearer scheme", () => {
    expect(doc["openapi"]).toMatch(/^3\.1\.\d+$/)
    expect(doc["info"]).toMatchObject({ title: expect.any(String), version: expect.any(String) })
    const schemes = (doc["components"] as Json)["securitySchemes"] as Json
    const bearer = Object.values(schemes).find((s) => (s as Json)["type"] === "http" && (s as Json)["scheme"] === "bearer")
    expect(bearer).toBeDefined()
  })

  it("validates as OpenAPI 3.1 (Redocly's structural rules: every object, field and $ref of the 3.1 specification)", async () => {
    expect(doc["openapi"]).toMatch(/^3\.1\./)
    const config = await createConfig({
      rules: {
        struct: "error",
        "no-unresolved-refs": "error",
        "security-defined": "error",
        "path-parameters-defined": "error",
        "operation-operationId-unique": "error",
        "no-invalid-media-type-examples": "error",
        "no-invalid-parameter-examples": "error"
      }
    })
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: "openapi.json", config })
    expect(problems.map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? "?"}`)).toEqual([])
  })

  it("types every query and path parameter as what it decodes to, with the bounds the server checks", () => {
    const parameter = (method: string, path: string, name: string) => {
      const found = ((op(method, path)["parameters"] ?? []) as Array<Json>).find((p) => p["name"] === name)
      if (found === undefined) throw new Error(`no parameter ${name} on ${method} ${path}`)
      return found["schema"] as Json
    }
    expect(parameter("get", "/authors/paginated", "page")).toEqual({ type: "integer", minimum: 1, maximum: MAX_PAGE, default: 1 })
    // Clamped to 1000 (the description says so), refused only above 32 bits: that is its maximum.
    expect(parameter("get", "/authors/paginated", "per_page")).toMatchObject({ type: "integer", minimum: 1, maximum: INT32_MAX, default: 20 })
    expect(parameter("get", "/authors/paginated", "id")).toEqual({ type: "integer" })
    expect(parameter("get", "/authors/paginated", "cursor")).toEqual({ type: "string" })
    expect(parameter("get", "/authors", "id")).toEqual({ type: "integer" })
    expect(parameter("get", "/authors", "name")).toMatchObject({ type: "string", maxLength: 1000 })
    for (const method of ["get", "put", "delete"]) {
      expect(parameter(method, "/authors/{author_id}", "author_id"), method).toEqual({ type: "integer", minimum: 1 })
    }
    for (const path of ["/audit-logs", "/audit-logs/user/{user_id}"]) {
      expect(parameter("get", path, "page"), path).toEqual({ type: "integer", minimum: 1, maximum: MAX_PAGE, default: 1 })
      expect(parameter("get", path, "per_page"), path).toEqual({ type: "integer", minimum: 1, maximum: 100, default: 20 })
      for (const name of ["start_date", "end_date"]) {
        expect(parameter("get", path, name), `${path} ${name}`).toMatchObject({ type: "string", format: "date-time" })
      }
    }
    expect(parameter("get", "/audit-logs", "outcome")).toEqual({ type: "string", enum: ["success", "error", "permission_denied"] })
    expect(parameter("get", "/audit-logs/{log_id}", "log_id")).toEqual({ type: "integer", minimum: 1 })
    const author = ((doc["components"] as Json)["schemas"] as Json)["Author"] as Json
    expect((author["properties"] as Json)["id"]).toMatchObject({ type: "integer", minimum: 1 })
  })

  it("the documented bounds are the server's: inside them a 200, outside a 422 on that parameter (per_page of authors is clamped)", async () => {
    const admin = (await login(app, "admin")).access_token
    const get = (path: string) => request(app, "GET", path, { token: admin })
    const refusedOn = (res: { status: number; body: unknown }, name: string) => {
      expect(res.status).toBe(422)
      expect(res.body).toMatchObject({ detail: [expect.objectContaining({ loc: ["query", name] })] })
    }
    expect((await get(`/authors/paginated?page=1&per_page=${AUTHORS_MAX_PER_PAGE + 1}`)).body).toMatchObject({ meta: { per_page: AUTHORS_MAX_PER_PAGE } })
    expect((await get(`/authors/paginated?page=${MAX_PAGE}`)).status).toBe(200)
    refusedOn(await get(`/authors/paginated?page=${MAX_PAGE + 1}`), "page")
    refusedOn(await get("/authors/paginated?page=0"), "page")
    refusedOn(await get("/authors/paginated?per_page=0"), "per_page")
    expect((await get(`/authors/paginated?per_page=${INT32_MAX}`)).body).toMatchObject({ meta: { per_page: AUTHORS_MAX_PER_PAGE } })
    refusedOn(await get(`/authors/paginated?per_page=${INT32_MAX + 1}`), "per_page")
    expect((await get("/audit-logs?per_page=100")).status).toBe(200)
    refusedOn(await get("/audit-logs?per_page=101"), "per_page")
    refusedOn(await get("/authors?id=abc"), "id")
    // author_id's minimum is what ids are, not a check: an id below it is an id no author has.
    expect(await get("/authors/0")).toMatchObject({ status: 404, body: { detail: "Author with ID 0 not found" } })
  })

  it("offers the OAuth2 password flow against /login beside the bearer scheme, on every operation that takes a bearer token", () => {
    const schemes = (doc["components"] as Json)["securitySchemes"] as Json
    expect(schemes["oauth2"]).toMatchObject({ type: "oauth2", flows: { password: { tokenUrl: "/login", scopes: {} } } })
    expect(schemes["bearer"]).toEqual({ type: "http", scheme: "bearer" })
    let withBearer = 0
    for (const { path, method, op: o } of operations()) {
      const security = (o["security"] ?? []) as Array<Json>
      if (!security.some((r) => "bearer" in r)) continue
      withBearer++
      expect(security, `${method} ${path}`).toEqual([{ bearer: [] }, { oauth2: [] }])
    }
    expect(withBearer).toBeGreaterThanOrEqual(9)
    // The token URL takes what the password flow posts.
    const content = ((op("post", "/login")["requestBody"] as Json)["content"]) as Json
    expect(Object.keys(content).sort()).toEqual(["application/json", "application/x-www-form-urlencoded"])
    expect((content["application/x-www-form-urlencoded"] as Json)["schema"]).toMatchObject({
      properties: { grant_type: { enum: ["password"] }, username: { type: "string" }, password: { type: "string" } },
      required: ["username", "password"]
    })
  })

  it("is well formed: every $ref resolves, responses have descriptions, path parameters are declared, ids unique", () => {
    const refs: Array<string> = []
    const walk = (node: unknown) => {
      if (Array.isArray(node)) node.forEach(walk)
      else if (typeof node === "object" && node !== null) {
        for (const [k, v] of Object.entries(node)) {
          if (k === "$ref" && typeof v === "string") refs.push(v)
          else walk(v)
        }
      }
    }
    walk(doc)
    for (const ref of refs) {
      expect(ref.startsWith("#/"), ref).toBe(true)
      const target = ref.slice(2).split("/").reduce<unknown>((n, key) => (n as Json | undefined)?.[key.replace(/~1/g, "/").replace(/~0/g, "~")], doc)
      expect(target, ref).toBeDefined()
    }
    const ids = new Set<string>()
    const schemeNames = Object.keys(((doc["components"] as Json)["securitySchemes"] ?? {}) as Json)
    for (const { path, method, op: o } of operations()) {
      for (const [status, response] of Object.entries(o["responses"] as Json)) {
        expect(status, `${method} ${path}`).toMatch(/^([1-5]\d\d|[1-5]XX|default)$/)
        expect(typeof (response as Json)["description"], `${method} ${path} ${status}`).toBe("string")
      }
      const declared = ((o["parameters"] ?? []) as Array<Json>).filter((p) => p["in"] === "path")
      for (const name of [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1])) {
        expect(declared.find((p) => p["name"] === name && p["required"] === true), `${method} ${path} {${name}}`).toBeDefined()
      }
      if (typeof o["operationId"] === "string") {
        expect(ids.has(o["operationId"]), o["operationId"]).toBe(false)
        ids.add(o["operationId"])
      }
      for (const requirement of (o["security"] ?? []) as Array<Json>) {
        for (const name of Object.keys(requirement)) expect(schemeNames).toContain(name)
      }
    }
  })

  it("describes every authors endpoint with its errors and the bearer requirement", () => {
    const authed: Array<[string, string, Array<string>]> = [
      ["get", "/authors", ["200"]],
      ["get", "/authors/paginated", ["200"]],
      ["get", "/authors/{author_id}", ["200", "404"]],
      ["post", "/authors", ["201", "409"]],
      ["put", "/authors/{author_id}", ["200", "404", "409"]],
      ["delete", "/authors/{author_id}", ["204", "404"]]
    ]
    for (const [method, path, own] of authed) {
      const o = op(method, path)
      expect(statuses(o), `${method} ${path}`).toEqual(expect.arrayContaining([...own, "401", "403", "422", "429"]))
      expect(o["security"], `${method} ${path}`).toEqual(expect.arrayContaining([expect.objectContaining({ bearer: [] })]))
    }
  })

  it("describes conditional reads on the author reads: If-None-Match in, ETag on the 200, the 304", () => {
    for (const path of ["/authors", "/authors/paginated", "/authors/{author_id}"]) {
      const o = op("get", path)
      expect(o["parameters"], path).toEqual(expect.arrayContaining([expect.objectContaining({ name: "If-None-Match", in: "header", required: false })]))
      expect(statuses(o), path).toEqual(expect.arrayContaining(["200", "304"]))
      const ok = (o["responses"] as Json)["200"] as Json
      expect(Object.keys(ok["headers"] as Json), path).toEqual(["ETag"])
      expect(ok["content"], path).toBeDefined()
    }
    expect(statuses(op("put", "/authors/{author_id}"))).not.toContain("304")
  })

  it("describes /login and /login/refresh without a bearer requirement", () => {
    for (const path of ["/login", "/login/refresh"]) {
      const o = op("post", path)
      expect(statuses(o)).toEqual(expect.arrayContaining(["200", "401", "422", "429", "503"]))
      expect((o["security"] ?? []) as Array<unknown>).toEqual([])
    }
  })

  it("describes the operational endpoints /livez, /readyz, /health and /metrics; /readyz documents its 503", () => {
    for (const path of ["/livez", "/readyz", "/health", "/metrics"]) expect(Object.keys(doc["paths"] as Json), path).toContain(path)
    // Unauthenticated: no security requirement of their own, and none inherited from the document.
    expect(doc["security"] ?? []).toEqual([])
    for (const path of ["/livez", "/readyz", "/health", "/metrics"]) expect(op("get", path)["security"] ?? [], path).toEqual([])
    expect(statuses(op("get", "/livez"))).toContain("200")
    expect(statuses(op("get", "/readyz"))).toEqual(expect.arrayContaining(["200", "503"]))
  })

  it("documents the 422 body in the FastAPI shape", () => {
    const response = (op("get", "/authors/paginated")["responses"] as Json)["422"] as Json
    const ref = ((((response["content"] as Json)["application/json"] as Json)["schema"]) as Json)["$ref"] as string
    const schema = ((doc["components"] as Json)["schemas"] as Json)[ref.split("/").pop()!] as Json
    expect(schema).toMatchObject({ type: "object", properties: { detail: { type: "array" } } })
    expect(JSON.stringify(schema)).toMatch(/"loc".*"msg"|"msg".*"loc"/)
  })
})

describe("/asyncapi.json and /proto/websocket.proto", () => {
  let asyncApi: Json

  beforeAll(async () => {
    const res = await fetch(`${app.url}/asyncapi.json`)
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toContain("application/json")
    expect(res.headers.get("x-ratelimit-limit")).toBeNull()
    asyncApi = await res.json() as Json
  })

  const refsResolve = (document: Json) => {
    const refs = JSON.stringify(document).match(/"\$ref":"[^"]+"/g) ?? []
    for (const raw of refs) {
      const ref = raw.slice(8, -1)
      const target = ref.slice(2).split("/").reduce<unknown>((n, key) => (n as Json | undefined)?.[key], document)
      expect(target, ref).toBeDefined()
    }
    return refs.length
  }

  it("is AsyncAPI 3.0 describing /web: every package of the server's table, both directions, every $ref resolving", () => {
    expect(asyncApi["asyncapi"]).toBe("3.0.0")
    const channel = (asyncApi["channels"] as Json)["web"] as Json
    expect(channel["address"]).toBe("/web")
    const messages = channel["messages"] as Record<string, Json>
    for (const pkg of Packages.values()) {
      expect(messages[`${pkg.name}_request`], pkg.name).toMatchObject({ "x-pkg-id": pkg.pkgId, "x-roles": [...pkg.roles] })
      expect(messages[`${pkg.name}_response`], pkg.name).toMatchObject({ "x-pkg-id": pkg.pkgId })
    }
    expect(Object.keys(messages)).toEqual(expect.arrayContaining(["broadcast", "auth", "auth_ok"]))
    expect(refsResolve(asyncApi)).toBeGreaterThan(0)
    const operations = asyncApi["operations"] as Record<string, Json>
    expect(operations["request"]).toMatchObject({ action: "receive" })
    expect(operations["broadcast"]).toMatchObject({ action: "send" })
  })

  it("the schemas are the server's: package 2 requires page and per_page; close and status codes are the documented ones", () => {
    const text = JSON.stringify(asyncApi)
    const request = JSON.stringify(((asyncApi["channels"] as Json)["web"] as Json)["messages"])
    expect(request).toMatch(/"required":\["page","per_page"\]/)
    const closeCodes = ((asyncApi["channels"] as Json)["web"] as Json)["x-close-codes"] as Array<{ code: number; reason: string }>
    expect(closeCodes).toEqual(expect.arrayContaining([
      expect.objectContaining({ code: 1001, reason: "Server shutting down" }),
      expect.objectContaining({ code: 1003, reason: "Invalid message format" }),
      expect.objectContaining({ code: 1008, reason: "Origin not allowed" }),
      expect.objectContaining({ code: 1008, reason: "Maximum concurrent connections exceeded" }),
      expect.objectContaining({ code: 1008, reason: "Message rate limit exceeded" }),
      expect.objectContaining({ code: 1009 }),
      expect.objectContaining({ code: 4001, reason: "Invalid or expired token" }),
      expect.objectContaining({ code: 4001, reason: "Session expired" }),
      expect.objectContaining({ code: 4002, reason: "Authentication timeout" })
    ]))
    expect((((asyncApi["channels"] as Json)["web"] as Json)["x-status-codes"] as Array<{ code: number }>).map((s) => s.code)).toEqual([0, 1, 2, 3])
    for (const event of ["author.created", "author.updated", "author.deleted"]) expect(text).toContain(event)
  })

  it("/proto/websocket.proto is served as text; neither document is in OpenAPI", async () => {
    const res = await fetch(`${app.url}/proto/websocket.proto`)
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toContain("text/plain")
    expect(await res.text()).toMatch(/message Response \{[\s\S]*Metadata meta = 5;/)
    expect(Object.keys(doc["paths"] as Json)).not.toContain("/asyncapi.json")
    expect(Object.keys(doc["paths"] as Json)).not.toContain("/proto/websocket.proto")
    expect(Object.keys(doc["paths"] as Json)).not.toContain("/web")
  })
})

describe.runIf(hasChromium)("docs in a real browser (headless Chromium)", () => {
  let browser: Browser
  beforeAll(async () => {
    browser = await launchChromium()
  })
  afterAll(() => browser.close())

  /** Opens a page that may only talk to the service (no internet), collecting CSP violations. */
  const open = async (path: string) => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const external: Array<string> = []
    const violations: Array<string> = []
    await page.route("**/*", (route) => {
      const url = route.request().url()
      if (url.startsWith(app.url) || url.startsWith("data:") || url.startsWith("blob:")) return route.continue()
      external.push(url)
      return route.abort()
    })
    page.on("console", (msg) => {
      if (/Content Security Policy/i.test(msg.text())) violations.push(msg.text())
    })
    await page.goto(`${app.url}${path}`)
    return { page, context, external, violations }
  }

  it("/docs (Swagger UI) renders every authors operation", async () => {
    const { page, context, external, violations } = await open("/docs")
    try {
      await page.locator(".opblock").first().waitFor({ timeout: 20_000 })
      const summaries = await page.locator(".opblock .opblock-summary-path").allTextContents()
      const paths = summaries.map((s) => s.replace(/\u200b/g, "").trim())
      expect(paths).toEqual(expect.arrayContaining(["/authors", "/authors/paginated", "/authors/{author_id}", "/login", "/login/refresh"]))
      expect(await page.locator(".opblock-delete").count()).toBeGreaterThan(0)
      expect(external).toEqual([])
      expect(violations).toEqual([])
    } finally {
      await context.close()
    }
  })

  it("/docs logs in through \"Authorize\" with a username and password (the password flow against /login) and then calls with the token", async () => {
    const { page, context, external, violations } = await open("/docs")
    try {
      const logins: Array<{ contentType: string | undefined; body: string | null }> = []
      const authorizations: Array<string | undefined> = []
      page.on("request", (req) => {
        const url = new URL(req.url())
        if (req.method() === "POST" && url.pathname === "/login") logins.push({ contentType: req.headers()["content-type"], body: req.postData() })
        if (req.method() === "GET" && url.pathname === "/authors") authorizations.push(req.headers()["authorization"])
      })
      await page.locator(".opblock").first().waitFor({ timeout: 20_000 })
      await page.locator("button.authorize").first().click()
      const dialog = page.locator(".modal-ux")
      // The dialog lists both schemes, each in its section: "bearer (http, Bearer)", "oauth2 (OAuth2, password)".
      const passwordFlow = dialog.locator(".auth-container", { hasText: "OAuth2, password" })
      await passwordFlow.locator("#oauth_username").fill("reader")
      await passwordFlow.locator("#oauth_password").fill("reader")
      await passwordFlow.locator("button.modal-btn.authorize").click()
      // Swagger UI shows Logout once the token endpoint answered with a token.
      await passwordFlow.locator("button", { hasText: "Logout" }).waitFor({ timeout: 10_000 })
      expect(logins).toHaveLength(1)
      expect(logins[0]!.contentType).toContain("application/x-www-form-urlencoded")
      expect(Object.fromEntries(new URLSearchParams(logins[0]!.body ?? ""))).toMatchObject({ grant_type: "password", username: "reader", password: "reader" })
      await dialog.locator("button.btn-done").first().click()

      const list = page.locator(".opblock-get", { has: page.locator(".opblock-summary-path", { hasText: /^\/authors$/ }) }).first()
      await list.locator(".opblock-summary").click()
      await list.locator("button.try-out__btn").click()
      await list.locator("button.execute").click()
      const status = list.locator(".live-responses-table tr.response .response-col_status")
      await status.waitFor({ timeout: 10_000 })
      expect((await status.textContent())?.trim()).toBe("200")
      expect(authorizations).toHaveLength(1)
      expect(authorizations[0]).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/)
      expect(external).toEqual([])
      expect(violations).toEqual([])
    } finally {
      await context.close()
    }
  })

  it("/redoc renders the operations", async () => {
    const { page, context, external, violations } = await open("/redoc")
    try {
      await page.locator("h2", { hasText: "List authors" }).first().waitFor({ timeout: 20_000 })
      const headings = (await page.locator("h2").allTextContents()).map((h) => h.trim())
      expect(headings).toEqual(expect.arrayContaining(["List authors", "Create an author", "Rename an author", "Delete an author"]))
      expect(external).toEqual([])
      // ReDoc's "powered by" footer points at its CDN logo; the CSP blocks it, nothing else.
      expect(violations.filter((v) => !v.includes("https://cdn.redoc.ly/redoc/logo-mini.svg"))).toEqual([])
    } finally {
      await context.close()
    }
  })
})
