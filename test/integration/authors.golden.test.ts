/**
 * Golden tests: every HTTP status and body of docs/http-api.md and docs/errors-and-limits.md, against the
 * embedded database and (when TEST_DATABASE_URL is set) real PostgreSQL.
 */
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { authHeader, login, request, signToken, startTestApp, TEST_DATABASE_URL, type TestApp } from "../support/TestApp.ts"

const backends = ["embedded", ...(TEST_DATABASE_URL !== undefined ? ["postgres"] as const : [])] as const
const HEX8 = /^[0-9a-f]{8}$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?$/

describe.each(backends)("authors HTTP contract (%s)", (backend) => {
  let app: TestApp
  let admin: string
  let editor: string
  let reader: string
  let refresh: string

  beforeAll(async () => {
    app = await startTestApp({ database: backend, config: { rateLimitEnabled: false } })
    const a = await login(app, "admin")
    admin = a.access_token
    refresh = a.refresh_token
    editor = (await login(app, "editor")).access_token
    reader = (await login(app, "reader")).access_token
  })
  afterAll(() => app.close())

  const create = async (name: string, token = admin) => {
    const res = await request(app, "POST", "/authors", { token, body: { name } })
    expect(res.status).toBe(201)
    return res.body as { id: number; name: string; created_at: string }
  }

  describe("authentication and roles", () => {
    it("401 Not authenticated without a bearer token, with WWW-Authenticate", async () => {
      for (const headers of [{}, { authorization: "" }, { authorization: "Bearer " }, { authorization: "Basic YWRtaW46YWRtaW4=" }, { authorization: "Token abc" }]) {
        const res = await request(app, "GET", "/authors", { headers })
        expect(res.status).toBe(401)
        expect(res.body).toEqual({ detail: "Not authenticated" })
        expect(res.headers.get("www-authenticate")).toBe("Bearer")
      }
    })

    it("401 Could not validate credentials for bad, expired, wrong-issuer, wrong-audience tokens", async () => {
      const tokens = [
        "not-a-jwt",
        `${admin.slice(0, -4)}AAAA`,
        await signToken(app, { sub: "u1", roles: ["get-authors"] }, { expiresIn: -10 }),
        await signToken(app, { sub: "u1", roles: ["get-authors"] }, { issuer: "https://evil.example" }),
        await signToken(app, { sub: "u1", roles: ["get-authors"] }, { audience: "someone-else" }),
        refresh // a refresh token is not a bearer token (§9)
      ]
      for (const token of tokens) {
        const res = await request(app, "GET", "/authors", { token })
        expect(res.status).toBe(401)
        expect(res.body).toEqual({ detail: "Could not validate credentials" })
        expect(res.headers.get("www-authenticate")).toBe("Bearer")
      }
    })

    it("an access token is refused at /login/refresh", async () => {
      const res = await request(app, "POST", "/login/refresh", { body: { refresh_token: admin } })
      expect(res.status).toBe(401)
      expect(res.body).toEqual({ detail: "Invalid refresh token" })
    })

    it("/login/refresh exchanges a refresh token for a new token response", async () => {
      const res = await request(app, "POST", "/login/refresh", { body: { refresh_token: refresh } })
      expect(res.status).toBe(200)
      expect(res.body).toMatchObject({ token_type: "Bearer", expires_in: 300, refresh_expires_in: 1800 })
      const next = res.body as { access_token: string }
      expect((await request(app, "GET", "/authors", { token: next.access_token })).status).toBe(200)
    })

    it("POST /login: 200 token response, 401 Invalid credentials", async () => {
      const ok = await request(app, "POST", "/login", { body: { username: "reader", password: "reader" } })
      expect(ok.status).toBe(200)
      expect(ok.body).toMatchObject({ token_type: "Bearer", expires_in: 300, refresh_expires_in: 1800 })
      for (const body of [{ username: "reader", password: "wrong" }, { username: "nobody", password: "x" }]) {
        const bad = await request(app, "POST", "/login", { body })
        expect(bad.status).toBe(401)
        expect(bad.body).toEqual({ detail: "Invalid credentials" })
      }
    })

    it("403 Forbidden for a missing role on every operation", async () => {
      const none = await signToken(app, { sub: "no-roles", roles: [] })
      expect(await request(app, "GET", "/authors", { token: none })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
      expect(await request(app, "GET", "/authors/paginated", { token: none })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
      expect(await request(app, "POST", "/authors", { token: reader, body: { name: "x" } })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
      expect(await request(app, "PUT", "/authors/1", { token: reader, body: { name: "x" } })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
      expect(await request(app, "DELETE", "/authors/1", { token: reader })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
    })

    it("POST /authors needs create-author only", async () => {
      const creator = await signToken(app, { sub: "creator", roles: ["create-author"] })
      const res = await request(app, "POST", "/authors", { token: creator, body: { name: "Only Creator" } })
      expect(res.status).toBe(201)
    })

    it("roles come from realm_access, resource_access[client] and top-level roles", async () => {
      for (const claims of [
        { realm_access: { roles: ["get-authors"] } },
        { resource_access: { "author-directory": { roles: ["get-authors"] } } },
        { roles: ["get-authors"] }
      ]) {
        const token = await signToken(app, { sub: "r", ...claims })
        expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
      }
      const otherClient = await signToken(app, { sub: "r", resource_access: { other: { roles: ["get-authors"] } } })
      expect((await request(app, "GET", "/authors", { token: otherClient })).status).toBe(403)
    })

    it("check order: 401 before 403 before 422", async () => {
      expect(await request(app, "POST", "/authors", { body: "{bad" })).toMatchObject({ status: 401, body: { detail: "Not authenticated" } })
      expect(await request(app, "POST", "/authors", { token: reader, body: "{bad" })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
      expect(await request(app, "GET", "/authors/paginated?page=0")).toMatchObject({ status: 401 })
      expect((await request(app, "GET", "/authors/paginated?page=0", { token: reader })).status).toBe(422)
      const none = await signToken(app, { sub: "no-roles", roles: [] })
      expect((await request(app, "GET", "/authors/paginated?page=0", { token: none })).status).toBe(403)
    })
  })

  describe("create, rename, delete", () => {
    it("201 with {id, name, created_at}; name trimmed; stored as given", async () => {
      const res = await request(app, "POST", "/authors", { token: editor, body: { name: "  \tGolden Émile  \n" } })
      expect(res.status).toBe(201)
      const body = res.body as Record<string, unknown>
      expect(Object.keys(body).sort()).toEqual(["created_at", "id", "name"])
      expect(body["name"]).toBe("Golden Émile")
      expect(typeof body["id"]).toBe("number")
      expect(body["created_at"]).toMatch(TIMESTAMP)
    })

    it("names are 1–255 code points after trimming", async () => {
      const astral = "😀".repeat(255) // 255 code points, 510 UTF-16 units
      expect((await request(app, "POST", "/authors", { token: admin, body: { name: astral } })).status).toBe(201)
      expect((await request(app, "POST", "/authors", { token: admin, body: { name: `  ${"b".repeat(255)}  ` } })).status).toBe(201)
      const long = await request(app, "POST", "/authors", { token: admin, body: { name: "c".repeat(256) } })
      expect(long.status).toBe(422)
      expect(long.body).toEqual({
        detail: [{ type: "string_too_long", loc: ["body", "name"], msg: "String should have at most 255 characters", input: "c".repeat(256) }]
      })
      const blank = await request(app, "POST", "/authors", { token: admin, body: { name: "   " } })
      expect(blank.body).toEqual({
        detail: [{ type: "string_too_short", loc: ["body", "name"], msg: "String should have at least 1 character", input: "   " }]
      })
    })

    it("409 on a duplicate name, exact (case and inner spaces matter), also after trimming", async () => {
      await create("Dup Name")
      const dup = await request(app, "POST", "/authors", { token: admin, body: { name: " Dup Name " } })
      expect(dup.status).toBe(409)
      expect(dup.body).toEqual({ detail: "Author with name Dup Name already exists" })
      expect((await request(app, "POST", "/authors", { token: admin, body: { name: "dup name" } })).status).toBe(201)
      expect((await request(app, "POST", "/authors", { token: admin, body: { name: "Dup  Name" } })).status).toBe(201)
    })

    it("PUT renames (trimmed), 409 on a taken name, 404 for an unknown id", async () => {
      const a = await create("Rename Me")
      await create("Taken Name")
      const renamed = await request(app, "PUT", `/authors/${a.id}`, { token: editor, body: { name: "  Renamed  " } })
      expect(renamed.status).toBe(200)
      expect(renamed.body).toEqual({ id: a.id, name: "Renamed", created_at: a.created_at })
      const taken = await request(app, "PUT", `/authors/${a.id}`, { token: editor, body: { name: "Taken Name" } })
      expect(taken).toMatchObject({ status: 409, body: { detail: "Author with name Taken Name already exists" } })
      const same = await request(app, "PUT", `/authors/${a.id}`, { token: editor, body: { name: "Renamed" } })
      expect(same.status).toBe(200)
      const missing = await request(app, "PUT", "/authors/987654", { token: editor, body: { name: "Whatever" } })
      expect(missing).toMatchObject({ status: 404, body: { detail: "Author with ID 987654 not found" } })
    })

    it("DELETE answers 204 with an empty body, then 404", async () => {
      const a = await create("Delete Me")
      const res = await fetch(`${app.url}/authors/${a.id}`, { method: "DELETE", headers: { authorization: `Bearer ${editor}` } })
      expect(res.status).toBe(204)
      expect(await res.text()).toBe("")
      const again = await request(app, "DELETE", `/authors/${a.id}`, { token: editor })
      expect(again).toMatchObject({ status: 404, body: { detail: `Author with ID ${a.id} not found` } })
    })

    it("uniqueness holds under 20 concurrent creates of one name: one 201, nineteen 409", async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, () => request(app, "POST", "/authors", { token: admin, body: { name: "Concurrent" } }))
      )
      const statuses = results.map((r) => r.status).sort()
      expect(statuses.filter((s) => s === 201)).toHaveLength(1)
      expect(statuses.filter((s) => s === 409)).toHaveLength(19)
      const list = await request(app, "GET", "/authors?name=Concurrent", { token: admin })
      expect(list.body).toHaveLength(1)
    })

    it("uniqueness holds under 20 concurrent renames to one name: one 200, nineteen 409", async () => {
      const authors = await Promise.all(Array.from({ length: 20 }, (_, i) => create(`Renamer ${i}`)))
      const results = await Promise.all(
        authors.map((a) => request(app, "PUT", `/authors/${a.id}`, { token: admin, body: { name: "Rename Target" } }))
      )
      const statuses = results.map((r) => r.status)
      expect(statuses.filter((s) => s === 200)).toHaveLength(1)
      expect(statuses.filter((s) => s === 409)).toHaveLength(19)
      expect((await request(app, "GET", "/authors?name=Rename%20Target", { token: admin })).body).toHaveLength(1)
    })
  })

  describe("GET /authors/{author_id}", () => {
    it("200 the author, exactly {id, name, created_at}", async () => {
      const a = await create("Fetch Me")
      const res = await request(app, "GET", `/authors/${a.id}`, { token: reader })
      expect(res.status).toBe(200)
      expect(res.body).toEqual({ id: a.id, name: "Fetch Me", created_at: a.created_at })
      expect(res.headers.get("content-type")).toMatch(/^application\/json/)
    })

    it("404 Author with ID <id> not found, also after a delete", async () => {
      expect(await request(app, "GET", "/authors/987654", { token: reader })).toMatchObject({
        status: 404,
        body: { detail: "Author with ID 987654 not found" }
      })
      const a = await create("Fetch Then Delete")
      expect((await request(app, "DELETE", `/authors/${a.id}`, { token: admin })).status).toBe(204)
      expect(await request(app, "GET", `/authors/${a.id}`, { token: reader })).toMatchObject({
        status: 404,
        body: { detail: `Author with ID ${a.id} not found` }
      })
    })

    it("an id beyond the 32-bit range, zero or negative is an author that cannot exist: 404, never 500", async () => {
      for (const id of ["2147483648", "99999999999999", "9007199254740991", "0", "-5"]) {
        expect(await request(app, "GET", `/authors/${id}`, { token: reader }), id).toMatchObject({
          status: 404,
          body: { detail: `Author with ID ${id} not found` }
        })
      }
    })

    it("422 at [path, author_id] for a non-integer id", async () => {
      for (const id of ["abc", "1.5", "1e3", "9007199254740993"]) {
        const res = await request(app, "GET", `/authors/${id}`, { token: reader })
        expect(res, id).toMatchObject({
          status: 422,
          body: { detail: [{ type: "int_parsing", loc: ["path", "author_id"], msg: "Input should be a valid integer, unable to parse string as an integer", input: id }] }
        })
      }
    })

    it("needs get-authors: 401 without a token, 403 without the role", async () => {
      expect(await request(app, "GET", "/authors/1")).toMatchObject({ status: 401, body: { detail: "Not authenticated" } })
      const creator = await signToken(app, { sub: "creator-only", roles: ["create-author"] })
      expect(await request(app, "GET", "/authors/1", { token: creator })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
    })

    it("/authors/paginated is still the page route, not an author id", async () => {
      const res = await request(app, "GET", "/authors/paginated", { token: reader })
      expect(res.status).toBe(200)
      expect(res.body).toMatchObject({ meta: { page: 1, per_page: 20 } })
    })
  })

  describe("listing and filters", () => {
    let ids: Array<number>
    beforeAll(async () => {
      ids = []
      for (const name of ["Filter Alpha", "filter beta", "FILTER GAMMA", "Other 100%_x"]) ids.push((await create(name)).id)
    })

    it("GET /authors is ordered by id", async () => {
      const res = await request(app, "GET", "/authors", { token: reader })
      const list = res.body as Array<{ id: number }>
      expect(list.map((a) => a.id)).toEqual([...list.map((a) => a.id)].sort((x, y) => x - y))
    })

    it("name is exact, search is a case-insensitive substring, both AND-combined with id", async () => {
      const exact = await request(app, "GET", "/authors?name=Filter%20Alpha", { token: reader })
      expect((exact.body as Array<{ name: string }>).map((a) => a.name)).toEqual(["Filter Alpha"])
      expect((await request(app, "GET", "/authors?name=filter%20alpha", { token: reader })).body).toEqual([])
      const search = await request(app, "GET", "/authors?search=fIlTeR", { token: reader })
      expect((search.body as Array<{ id: number }>).map((a) => a.id)).toEqual(ids.slice(0, 3))
      const and = await request(app, "GET", `/authors?search=filter&id=${ids[1]}`, { token: reader })
      expect((and.body as Array<{ name: string }>).map((a) => a.name)).toEqual(["filter beta"])
      const none = await request(app, "GET", `/authors?name=Filter%20Alpha&id=${ids[1]}`, { token: reader })
      expect(none.body).toEqual([])
      const all3 = await request(app, "GET", `/authors?name=Filter%20Alpha&search=alp&id=${ids[0]}`, { token: reader })
      expect(all3.body).toHaveLength(1)
    })

    it("search treats % and _ as literals", async () => {
      const pct = await request(app, "GET", "/authors?search=100%25_", { token: reader })
      expect((pct.body as Array<{ name: string }>).map((a) => a.name)).toEqual(["Other 100%_x"])
      expect((await request(app, "GET", "/authors?search=%25%25%25", { token: reader })).body).toEqual([])
    })
  })

  describe("pagination", () => {
    let token: string
    let total: number
    beforeAll(async () => {
      token = reader
      for (let i = 0; i < 7; i++) await create(`Page Author ${i}`)
      total = ((await request(app, "GET", "/authors", { token })).body as Array<unknown>).length
    })

    it("meta = {page, per_page, total, pages, next_cursor, has_more}; pages = ceil(total/per_page)", async () => {
      const res = await request(app, "GET", "/authors/paginated?page=1&per_page=3", { token })
      expect(res.status).toBe(200)
      const body = res.body as { items: Array<{ id: number }>; meta: Record<string, unknown> }
      expect(Object.keys(body.meta).sort()).toEqual(["has_more", "next_cursor", "page", "pages", "per_page", "total"])
      expect(body.meta).toMatchObject({ page: 1, per_page: 3, total, pages: Math.ceil(total / 3), has_more: true })
      expect(typeof body.meta["next_cursor"]).toBe("string")
      expect(body.items).toHaveLength(3)
    })

    it("defaults page 1, per_page 20", async () => {
      const body = (await request(app, "GET", "/authors/paginated", { token })).body as { meta: Record<string, unknown> }
      expect(body.meta).toMatchObject({ page: 1, per_page: 20 })
    })

    it("per_page above 1000 is clamped to 1000", async () => {
      const body = (await request(app, "GET", "/authors/paginated?per_page=5000", { token })).body as { meta: Record<string, unknown> }
      expect(body.meta).toMatchObject({ per_page: 1000, pages: 1, has_more: false, next_cursor: null })
    })

    // page and per_page are 32-bit: 2147483647 is accepted (per_page clamped), anything above is refused as out of range.
    it.each([
      ["page", 2 ** 31 - 1, 200],
      ["page", 2 ** 31, 422],
      ["page", 2 ** 32, 422],
      ["page", 2 ** 52, 422],
      ["per_page", 2 ** 31 - 1, 200],
      ["per_page", 2 ** 31, 422],
      ["per_page", 2 ** 32, 422],
      ["per_page", 2 ** 52, 422]
    ])("%s=%d: %d", async (name, value, status) => {
      const res = await request(app, "GET", `/authors/paginated?${name}=${value}`, { token })
      expect(res.status).toBe(status)
      if (status === 200) {
        expect(res.body).toMatchObject({ meta: name === "page" ? { page: value, per_page: 20 } : { page: 1, per_page: 1000 } })
      } else {
        expect(res.body).toEqual({
          detail: [{ type: "less_than_equal", loc: ["query", name], msg: "Input should be less than or equal to 2147483647", input: String(value) }]
        })
      }
    })

    it("a page answered from the cache is not answered for a per_page above 32 bits (the front door refuses it as the endpoint does)", async () => {
      for (let i = 0; i < 2; i++) {
        const warm = await request(app, "GET", "/authors/paginated?per_page=1000", { token })
        expect(warm.status).toBe(200)
      }
      const res = await request(app, "GET", `/authors/paginated?per_page=${2 ** 31}`, { token })
      expect(res.status).toBe(422)
      expect(res.body).toMatchObject({ detail: [{ type: "less_than_equal", loc: ["query", "per_page"] }] })
    })

    it("a page past the end returns items: [] with correct meta", async () => {
      const res = await request(app, "GET", "/authors/paginated?page=999&per_page=10", { token })
      expect(res.body).toEqual({
        items: [],
        meta: { page: 999, per_page: 10, total, pages: Math.ceil(total / 10), next_cursor: null, has_more: false }
      })
    })

    it("pages is 0 when total is 0", async () => {
      const res = await request(app, "GET", "/authors/paginated?name=nobody-has-this-name", { token })
      expect(res.body).toEqual({ items: [], meta: { page: 1, per_page: 20, total: 0, pages: 0, next_cursor: null, has_more: false } })
    })

    it("the cursor walks every author once, in id order, and matches offset pages", async () => {
      const all = (await request(app, "GET", "/authors", { token })).body as Array<{ id: number }>
      const seen: Array<number> = []
      let cursor: string | null = null
      let first = true
      while (first || cursor !== null) {
        const path: string = `/authors/paginated?per_page=4${cursor !== null ? `&cursor=${encodeURIComponent(cursor)}` : ""}`
        const body = (await request(app, "GET", path, { token })).body as {
          items: Array<{ id: number }>
          meta: { next_cursor: string | null; has_more: boolean; total: number }
        }
        expect(body.meta.total).toBe(all.length)
        expect(body.meta.has_more).toBe(body.meta.next_cursor !== null)
        seen.push(...body.items.map((a) => a.id))
        cursor = body.meta.next_cursor
        first = false
      }
      expect(seen).toEqual(all.map((a) => a.id))
      const page2 = (await request(app, "GET", "/authors/paginated?page=2&per_page=4", { token })).body as { items: Array<{ id: number }> }
      expect(page2.items.map((a) => a.id)).toEqual(all.slice(4, 8).map((a) => a.id))
    })

    it("filters apply to pages (name exact, id)", async () => {
      const res = await request(app, "GET", "/authors/paginated?name=Page%20Author%203", { token })
      const body = res.body as { items: Array<{ name: string }>; meta: { total: number; pages: number } }
      expect(body.items.map((a) => a.name)).toEqual(["Page Author 3"])
      expect(body.meta).toMatchObject({ total: 1, pages: 1 })
    })

    it("422 for page < 1, per_page < 1, non-integers and bad cursors", async () => {
      const cases: Array<[string, object]> = [
        ["page=0", { type: "greater_than_equal", loc: ["query", "page"], msg: "Input should be greater than or equal to 1", input: "0" }],
        ["per_page=0", { type: "greater_than_equal", loc: ["query", "per_page"], msg: "Input should be greater than or equal to 1", input: "0" }],
        ["page=abc", { type: "int_parsing", loc: ["query", "page"], msg: "Input should be a valid integer, unable to parse string as an integer", input: "abc" }],
        ["per_page=1.5", { type: "int_parsing", loc: ["query", "per_page"], msg: "Input should be a valid integer, unable to parse string as an integer", input: "1.5" }],
        ["cursor=zzz", { type: "value_error", loc: ["query", "cursor"], msg: "Invalid cursor", input: "zzz" }]
      ]
      for (const [query, issue] of cases) {
        const res = await request(app, "GET", `/authors/paginated?${query}`, { token })
        expect(res.status, query).toBe(422)
        expect(res.body, query).toEqual({ detail: [issue] })
      }
    })
  })

  describe("validation shapes", () => {
    it("422 json_invalid for a malformed JSON body", async () => {
      const res = await request(app, "POST", "/authors", { token: admin, body: "{bad" })
      expect(res.status).toBe(422)
      const detail = (res.body as { detail: Array<Record<string, unknown>> }).detail
      expect(detail).toHaveLength(1)
      expect(detail[0]).toMatchObject({ type: "json_invalid", loc: ["body", 0], input: {} })
      expect(detail[0]!["msg"]).toMatch(/^JSON decode error/)
    })

    it("422 for a missing field, wrong type, non-object body", async () => {
      expect((await request(app, "POST", "/authors", { token: admin, body: {} })).body).toEqual({
        detail: [{ type: "missing", loc: ["body", "name"], msg: "Field required", input: {} }]
      })
      expect((await request(app, "POST", "/authors", { token: admin, body: { name: 5 } })).body).toEqual({
        detail: [{ type: "string_type", loc: ["body", "name"], msg: "Input should be a valid string", input: 5 }]
      })
      expect((await request(app, "PUT", "/authors/1", { token: admin, body: [] })).body).toEqual({
        detail: [{ type: "model_attributes_type", loc: ["body"], msg: "Input should be a valid dictionary or object to extract fields from", input: [] }]
      })
    })

    it("422 for wrong content types (form, multipart, text), and nothing is created", async () => {
      const cases: Array<[string, string]> = [
        ["application/x-www-form-urlencoded", "name=Form%20Author"],
        ["multipart/form-data; boundary=XYZ", "--XYZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nForm Author\r\n--XYZ--\r\n"],
        ["multipart/form-data; boundary=XYZ", "garbage"],
        ["text/plain", "{\"name\":\"Form Author\"}"]
      ]
      for (const [contentType, body] of cases) {
        const res = await request(app, "POST", "/authors", { token: admin, body, headers: { "content-type": contentType } })
        expect(res.status, contentType).toBe(422)
        expect(res.body).toEqual({
          detail: [{ type: "model_attributes_type", loc: ["body"], msg: "Input should be a valid dictionary or object to extract fields from", input: contentType }]
        })
      }
      expect((await request(app, "GET", "/authors?name=Form%20Author", { token: admin })).body).toEqual([])
    })

    it("422 for a non-integer author_id in the path", async () => {
      const res = await request(app, "DELETE", "/authors/abc", { token: admin })
      expect(res).toMatchObject({
        status: 422,
        body: { detail: [{ type: "int_parsing", loc: ["path", "author_id"], msg: "Input should be a valid integer, unable to parse string as an integer", input: "abc" }] }
      })
    })
  })

  describe("front door", () => {
    it("404 Not Found for unknown routes", async () => {
      for (const path of ["/nope", "/api/authors", "/authors/1/extra"]) {
        const res = await request(app, "GET", path, { token: admin })
        expect(res, path).toMatchObject({ status: 404, body: { detail: "Not Found" } })
      }
    })

    it("correlation id: accepted when valid, replaced when invalid, generated when absent, on every response", async () => {
      const valid = await request(app, "GET", "/authors", { token: admin, headers: { "x-correlation-id": "abc.DEF_123-x" } })
      expect(valid.headers.get("x-correlation-id")).toBe("abc.DEF_123-x")
      const max = "a".repeat(64)
      expect((await request(app, "GET", "/nope", { headers: { "x-correlation-id": max } })).headers.get("x-correlation-id")).toBe(max)
      for (const bad of ["a".repeat(65), "has space", "semi;colon", "slash/y", "<script>"]) {
        const res = await request(app, "GET", "/authors", { headers: { "x-correlation-id": bad } })
        expect(res.status).toBe(401)
        expect(res.headers.get("x-correlation-id")).toMatch(HEX8)
      }
      expect((await request(app, "GET", "/health")).headers.get("x-correlation-id")).toMatch(HEX8)
      expect((await request(app, "POST", "/authors", { token: admin, body: "{" })).headers.get("x-correlation-id")).toMatch(HEX8)
    })

    it("security headers on every response, errors included", async () => {
      const responses = [
        await request(app, "GET", "/authors", { token: admin }),
        await request(app, "GET", "/authors"),
        await request(app, "GET", "/nope"),
        await request(app, "POST", "/authors", { token: admin, body: "{" }),
        await request(app, "GET", "/docs")
      ]
      for (const res of responses) {
        expect(res.headers.get("x-content-type-options")).toBe("nosniff")
        expect(res.headers.get("x-frame-options")).toBe("DENY")
        expect(res.headers.get("referrer-policy")).toBe("no-referrer")
        expect(res.headers.get("content-security-policy")).toBeTruthy()
      }
    })

    it("413 Request body too large above MAX_REQUEST_BODY_BYTES (default 1 MiB), before authentication", async () => {
      const big = JSON.stringify({ name: "x".repeat(1_048_577) })
      const res = await request(app, "POST", "/authors", { body: big })
      expect(res).toMatchObject({ status: 413, body: { detail: "Request body too large" } })
      expect(res.headers.get("x-correlation-id")).toMatch(HEX8)
    })

    // Without Content-Length the front door reads the body itself, under the limit: the one check
    // that stands between a streamed body and the handler.
    it("413 for a chunked body (no Content-Length) above the limit; under it, the request goes through", async () => {
      const send = (text: string) =>
        fetch(`${app.url}/authors`, {
          method: "POST",
          headers: { "content-type": "application/json", ...authHeader(admin) },
          body: new ReadableStream<Uint8Array>({
            start(controller) {
              controller.enqueue(new TextEncoder().encode(text))
              controller.close()
            }
          }),
          duplex: "half"
        } as RequestInit)
      const big = await send(JSON.stringify({ name: "x".repeat(1_048_577) }))
      expect(big.status).toBe(413)
      expect(await big.json()).toEqual({ detail: "Request body too large" })
      const name = `Chunked ${crypto.randomUUID()}`
      const small = await send(JSON.stringify({ name }))
      expect(small.status).toBe(201)
      expect(await small.json()).toMatchObject({ name })
    })
  })

})

// A 500 needs a broken database; only PostgreSQL can be broken from outside.
describe.runIf(TEST_DATABASE_URL !== undefined)("a database failure (PostgreSQL)", () => {
  let app: TestApp
  let admin: string
  beforeAll(async () => {
    app = await startTestApp({ database: "postgres", config: { rateLimitEnabled: false } })
    admin = (await login(app, "admin")).access_token
  })
  afterAll(() => app.close())

  it("500 Internal server error leaks nothing", async () => {
    const client = new pg.Client({ connectionString: app.databaseUrl })
    await client.connect()
    try {
      await client.query("ALTER TABLE authors RENAME TO authors_moved")
      const res = await request(app, "GET", "/authors", { token: admin })
      expect(res.status).toBe(500)
      expect(res.body).toEqual({ detail: "Internal server error" })
      expect(res.headers.get("x-correlation-id")).toMatch(HEX8)
    } finally {
      await client.query("ALTER TABLE authors_moved RENAME TO authors")
      await client.end()
    }
  })
})

describe("check order with the rate limiter on: 413 → 429 → 401", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp({ config: { rateLimitEnabled: true, rateLimitPerMinute: 1, rateLimitBurst: 0, maxRequestBodyBytes: 100 } })
  })
  afterAll(() => app.close())

  it("413 beats 429, 429 beats 401, and 429 carries the correlation id", async () => {
    const first = await request(app, "GET", "/authors")
    expect(first.status).toBe(401)
    const big = await request(app, "POST", "/authors", { body: { name: "x".repeat(200) } })
    expect(big).toMatchObject({ status: 413, body: { detail: "Request body too large" } })
    const limited = await request(app, "GET", "/authors", { headers: { "x-correlation-id": "corr-429" } })
    expect(limited).toMatchObject({ status: 429, body: { detail: "Rate limit exceeded" } })
    expect(limited.headers.get("x-correlation-id")).toBe("corr-429")
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
  })

  it("413 and 429 carry the security headers and their own X-Request-ID (every response, errors and 429 included)", async () => {
    const big = await request(app, "POST", "/authors", { body: { name: "y".repeat(200) } })
    expect(big).toMatchObject({ status: 413, body: { detail: "Request body too large" } })
    // A budget of 1: the second of these is refused whatever came before.
    await request(app, "GET", "/authors")
    const limited = await request(app, "GET", "/authors")
    expect(limited).toMatchObject({ status: 429, body: { detail: "Rate limit exceeded" } })
    for (const res of [big, limited]) {
      expect(res.headers.get("x-content-type-options"), String(res.status)).toBe("nosniff")
      expect(res.headers.get("x-frame-options"), String(res.status)).toBe("DENY")
      expect(res.headers.get("referrer-policy"), String(res.status)).toBe("no-referrer")
      expect(res.headers.get("content-security-policy"), String(res.status)).toContain("default-src 'none'")
      expect(res.headers.get("x-request-id"), String(res.status)).toMatch(UUID)
      expect(res.headers.get("x-correlation-id"), String(res.status)).toMatch(HEX8)
    }
    expect(big.headers.get("x-request-id")).not.toBe(limited.headers.get("x-request-id"))
  })
})
