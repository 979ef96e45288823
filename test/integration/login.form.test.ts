/**
 * POST /login takes the credentials as an OAuth2 password grant (`application/x-www-form-urlencoded`,
 * what Swagger UI's "Authorize" dialog posts) as well as JSON, and answers both alike: the token
 * response, 401 for wrong credentials, the FastAPI 422 for a missing or wrong field.
 */
import { decodeJwt } from "jose"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { awaitAuditRecord } from "../support/AuditTrail.ts"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"

let app: TestApp

beforeAll(async () => {
  app = await startTestApp({ config: { rateLimitEnabled: false } })
})
afterAll(() => app.close())

const FORM = "application/x-www-form-urlencoded"

const postForm = (fields: Record<string, string>, contentType = FORM) =>
  request(app, "POST", "/login", { body: new URLSearchParams(fields).toString(), headers: { "content-type": contentType } })

describe("POST /login with a form body", () => {
  it("the password grant Swagger UI posts gets the token response, whose access token is accepted as a bearer token", async () => {
    const res = await postForm({ grant_type: "password", username: "reader", password: "reader" })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({
      access_token: expect.any(String),
      refresh_token: expect.any(String),
      token_type: "Bearer",
      expires_in: 300,
      refresh_expires_in: 1800
    })
    const token = (res.body as { access_token: string }).access_token
    expect(decodeJwt(token)).toMatchObject({ preferred_username: "reader" })
    expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
  })

  it("takes the form without grant_type, with scope and client credentials, and with a charset parameter", async () => {
    expect((await postForm({ username: "reader", password: "reader" })).status).toBe(200)
    expect((await postForm({ grant_type: "password", username: "reader", password: "reader", scope: "", client_id: "swagger" })).status)
      .toBe(200)
    expect((await postForm({ username: "reader", password: "reader" }, `${FORM}; charset=UTF-8`)).status).toBe(200)
  })

  it("a wrong password is the JSON body's 401", async () => {
    const form = await postForm({ grant_type: "password", username: "reader", password: "nope" })
    const json = await request(app, "POST", "/login", { body: { username: "reader", password: "nope" } })
    expect(form).toMatchObject({ status: 401, body: { detail: "Invalid credentials" } })
    expect(form.body).toEqual(json.body)
  })

  it("a form login is audited like a JSON one: the username as sent, never the password", async () => {
    const admin = (await login(app, "admin")).access_token
    const bad = await postForm({ grant_type: "password", username: "mallory", password: "hunter2" })
    expect(bad.status).toBe(401)
    const record = await awaitAuditRecord(app, admin, bad.headers.get("x-request-id")!, "&username=mallory")
    expect(record).toMatchObject({ user_id: "", username: "mallory", action_type: "POST", resource: "/login", outcome: "error", response_status: 401 })
    const detail = await request(app, "GET", `/audit-logs/${record.id}`, { token: admin })
    expect(detail.body).toMatchObject({ request_data: { body: { username: "mallory", password: "[REDACTED]" } } })
    expect(JSON.stringify(detail.body)).not.toContain("hunter2")
  })

  it("a missing field is the JSON body's 422", async () => {
    const form = await postForm({ grant_type: "password", username: "reader" })
    expect(form.status).toBe(422)
    expect(form.body).toEqual({
      detail: [{ type: "missing", loc: ["body", "password"], msg: "Field required", input: { grant_type: "password", username: "reader" } }]
    })
    const json = await request(app, "POST", "/login", { body: { username: "reader" } })
    expect(json.status).toBe(422)
    expect((json.body as { detail: Array<{ type: string; loc: Array<string> }> }).detail.map(({ type, loc }) => ({ type, loc })))
      .toEqual([{ type: "missing", loc: ["body", "password"] }])
  })

  it("a grant other than password is a 422 on grant_type", async () => {
    const res = await postForm({ grant_type: "client_credentials", username: "reader", password: "reader" })
    expect(res.status).toBe(422)
    expect(res.body).toEqual({
      detail: [{
        type: "string_pattern_mismatch",
        loc: ["body", "grant_type"],
        msg: "String should match pattern '^password$'",
        input: "client_credentials"
      }]
    })
  })

  it("a form that is empty, repeats a field, or carries broken escapes is a 4xx with a detail, never a 5xx", async () => {
    const raw = (body: string) => request(app, "POST", "/login", { body, headers: { "content-type": FORM } })
    const locs = (body: unknown) => (body as { detail: Array<{ loc: Array<string> }> }).detail.map((d) => d.loc)
    const empty = await raw("")
    const emptyJson = await request(app, "POST", "/login", { body: {} })
    expect(empty.status).toBe(422)
    expect(locs(empty.body)).toContainEqual(["body", "username"])
    expect(locs(empty.body)).toEqual(locs(emptyJson.body))
    const repeated = await raw("username=reader&username=admin&password=reader")
    expect(repeated.status).toBe(422)
    expect(repeated.body).toMatchObject({ detail: [expect.objectContaining({ loc: ["body", "username"] })] })
    for (const body of ["%%%", "username=%FF%FE&password=x", "username=a%00b&password=x", `username=${"u".repeat(2000)}&password=x`]) {
      const res = await raw(body)
      expect(res.status, body).toBeGreaterThanOrEqual(400)
      expect(res.status, body).toBeLessThan(500)
      expect(res.body, body).toHaveProperty("detail")
    }
  })

  it("other endpoints still refuse a form body with the wrong-content-type 422", async () => {
    const res = await request(app, "POST", "/login/refresh", { body: "refresh_token=x", headers: { "content-type": FORM } })
    expect(res.status).toBe(422)
    expect(res.body).toMatchObject({ detail: [expect.objectContaining({ type: "model_attributes_type", loc: ["body"] })] })
  })
})
