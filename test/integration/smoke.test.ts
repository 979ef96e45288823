import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"

describe("smoke", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp()
  })
  afterAll(() => app.close())

  it("creates and lists an author", async () => {
    const { access_token } = await login(app, "admin")
    const created = await request(app, "POST", "/authors", { token: access_token, body: { name: "  Ada Lovelace " } })
    expect(created.status).toBe(201)
    expect(created.body).toMatchObject({ id: 1, name: "Ada Lovelace" })
    const list = await request(app, "GET", "/authors", { token: access_token })
    expect(list.status).toBe(200)
    expect(list.body).toEqual([created.body])
  })
})
