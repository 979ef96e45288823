/**
 * The OIDC identity path against oauth2-mock-server playing a Keycloak realm on loopback
 * (STACK-NOTES §h): password and refresh grants through /login, role claims, issuer/audience/
 * exp/nbf checks, asymmetric algorithms only, key rotation, and an unreachable provider.
 */
import { Option } from "effect"
import { SignJWT } from "jose"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { OAuth2Server } from "oauth2-mock-server"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { request, startTestApp, type TestApp } from "../support/TestApp.ts"

const REALM = "/realms/demo"
const KC = "/protocol/openid-connect"
const CLIENT_ID = "author-directory"
const AUDIENCE = "author-directory-api"
const ROLES: Record<string, ReadonlyArray<string>> = {
  admin: ["admin", "user", "get-authors", "create-author", "update-author", "delete-author"],
  editor: ["user", "get-authors", "create-author", "update-author", "delete-author"],
  reader: ["user", "get-authors"]
}

let oidc: OAuth2Server
let http: Server
let issuer: string
let firstKid: string
let app: TestApp
/** Refresh tokens the mock handed out, by user (the mock itself accepts any). */
const refreshTokens = new Map<string, string>()

const form = (req: unknown) => (req as { body: Record<string, string | undefined> }).body

beforeAll(async () => {
  oidc = new OAuth2Server(undefined, undefined, {
    endpoints: {
      wellKnownDocument: "/.well-known/openid-configuration",
      token: `${KC}/token`,
      jwks: `${KC}/certs`,
      authorize: `${KC}/auth`,
      userinfo: `${KC}/userinfo`,
      endSession: `${KC}/logout`,
      introspect: `${KC}/token/introspect`,
      revoke: `${KC}/revoke`
    }
  })
  firstKid = (await oidc.issuer.keys.generate("RS256")).kid
  // The mock routes on bare paths but advertises issuer.url + path: strip the realm prefix.
  http = createServer((req, res) => {
    req.url = (req.url ?? "/").replace(/^\/realms\/demo/, "") || "/"
    void oidc.service.requestHandler(req, res)
  })
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
  issuer = `http://127.0.0.1:${(http.address() as AddressInfo).port}${REALM}`
  oidc.issuer.url = issuer

  oidc.service.on("beforeTokenSigning", (token, req) => {
    const body = form(req)
    const username = body["grant_type"] === "password" ? body["username"] : refreshTokens.get(body["refresh_token"] ?? "")
    if (username === undefined) return
    Object.assign(token.payload, {
      typ: "Bearer",
      sub: `uuid-${username}`,
      preferred_username: username,
      realm_access: { roles: ROLES[username] ?? [] },
      aud: AUDIENCE,
      azp: body["client_id"]
    })
  })
  oidc.service.on("beforeResponse", (response, req) => {
    const body = form(req)
    const grant = body["grant_type"]
    const badPassword = grant === "password" && (ROLES[body["username"] ?? ""] === undefined || body["password"] !== body["username"])
    const badRefresh = grant === "refresh_token" && !refreshTokens.has(body["refresh_token"] ?? "")
    if (badPassword || badRefresh) {
      response.statusCode = 401
      response.body = { error: "invalid_grant", error_description: badPassword ? "Invalid user credentials" : "Invalid refresh token" }
      return
    }
    const issued = (response.body as Record<string, unknown>)["refresh_token"]
    const user = grant === "password" ? body["username"] : refreshTokens.get(body["refresh_token"] ?? "")
    if (typeof issued === "string" && user !== undefined) refreshTokens.set(issued, user)
  })

  app = await startTestApp({
    config: {
      rateLimitEnabled: false,
      oidcIssuerUrl: Option.some(issuer),
      oidcClientId: CLIENT_ID,
      oidcAudience: Option.some(AUDIENCE)
    }
  })
})

afterAll(async () => {
  await app.close()
  http.closeAllConnections()
  await new Promise((resolve) => http.close(resolve))
})

/** A token from the mock's current key (or a given one) with Keycloak-like claims. */
const mint = (claims: Record<string, unknown>, options: { kid?: string; expiresIn?: number } = {}) =>
  oidc.issuer.buildToken({
    kid: options.kid ?? firstKid,
    ...(options.expiresIn !== undefined ? { expiresIn: options.expiresIn } : {}),
    scopesOrTransform: (_header, payload) => {
      Object.assign(payload, { typ: "Bearer", sub: "uuid-minted", preferred_username: "minted", aud: AUDIENCE, azp: CLIENT_ID, ...claims })
    }
  })

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url")

describe("OIDC provider (oauth2-mock-server as a Keycloak realm)", () => {
  it("/login password grant → 200 token response whose access token works", async () => {
    const res = await request(app, "POST", "/login", { body: { username: "editor", password: "editor" } })
    expect(res.status).toBe(200)
    const body = res.body as Record<string, unknown>
    expect(body).toMatchObject({ token_type: "Bearer" })
    expect(typeof body["access_token"]).toBe("string")
    expect(typeof body["refresh_token"]).toBe("string")
    expect(typeof body["expires_in"]).toBe("number")
    const created = await request(app, "POST", "/authors", { token: body["access_token"] as string, body: { name: "OIDC Author" } })
    expect(created.status).toBe(201)
  })

  it("wrong password → 401 Invalid credentials", async () => {
    const res = await request(app, "POST", "/login", { body: { username: "editor", password: "nope" } })
    expect(res).toMatchObject({ status: 401, body: { detail: "Invalid credentials" } })
  })

  it("/login/refresh → 200 with a working access token; an unknown refresh token → 401", async () => {
    const first = (await request(app, "POST", "/login", { body: { username: "reader", password: "reader" } })).body as Record<string, string>
    const res = await request(app, "POST", "/login/refresh", { body: { refresh_token: first["refresh_token"] } })
    expect(res.status).toBe(200)
    const next = res.body as Record<string, string>
    expect((await request(app, "GET", "/authors", { token: next["access_token"]! })).status).toBe(200)
    const bad = await request(app, "POST", "/login/refresh", { body: { refresh_token: "not-issued" } })
    expect(bad).toMatchObject({ status: 401, body: { detail: "Invalid refresh token" } })
  })

  it("roles from realm_access, resource_access[client] and top-level roles, unioned", async () => {
    const realm = await mint({ realm_access: { roles: ["get-authors"] } })
    const client = await mint({ resource_access: { [CLIENT_ID]: { roles: ["get-authors"] } } })
    const top = await mint({ roles: ["get-authors"] })
    for (const token of [realm, client, top]) expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
    const otherClient = await mint({ resource_access: { account: { roles: ["get-authors"] } } })
    expect(await request(app, "GET", "/authors", { token: otherClient })).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
    const union = await mint({
      realm_access: { roles: ["get-authors"] },
      resource_access: { [CLIENT_ID]: { roles: ["create-author"] } },
      roles: ["delete-author"]
    })
    const made = await request(app, "POST", "/authors", { token: union, body: { name: "Union Roles" } })
    expect(made.status).toBe(201)
    const id = (made.body as { id: number }).id
    expect((await request(app, "DELETE", `/authors/${id}`, { token: union })).status).toBe(204)
    expect((await request(app, "PUT", `/authors/${id}`, { token: union, body: { name: "x" } })).status).toBe(403)
  })

  it("issuer, audience, exp and nbf are checked", async () => {
    const now = Math.floor(Date.now() / 1000)
    const rejected = [
      await mint({ realm_access: { roles: ["get-authors"] }, iss: "http://127.0.0.1:1/realms/other" }),
      await mint({ realm_access: { roles: ["get-authors"] }, aud: "account" }),
      await mint({ realm_access: { roles: ["get-authors"] } }, { expiresIn: -60 }),
      await mint({ realm_access: { roles: ["get-authors"] }, nbf: now + 3600 }),
      await mint({ realm_access: { roles: ["get-authors"] }, typ: "Refresh" })
    ]
    for (const token of rejected) {
      const res = await request(app, "GET", "/authors", { token })
      expect(res).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } })
      expect(res.headers.get("www-authenticate")).toBe("Bearer")
    }
  })

  it("alg none and HS256 are rejected", async () => {
    const now = Math.floor(Date.now() / 1000)
    const payload = { iss: issuer, aud: AUDIENCE, sub: "uuid-forged", exp: now + 300, iat: now, realm_access: { roles: ROLES["admin"] } }
    const none = `${b64url({ alg: "none", typ: "JWT", kid: firstKid })}.${b64url(payload)}.`
    const hs256 = await new SignJWT(payload)
      .setProtectedHeader({ alg: "HS256", kid: firstKid })
      .sign(new TextEncoder().encode("a-shared-secret-that-must-not-work-0123456789"))
    for (const token of [none, hs256]) {
      expect(await request(app, "GET", "/authors", { token })).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } })
    }
  })

  it("key rotation: a token signed with a key newly published in the JWKS verifies", async () => {
    const before = await mint({ realm_access: { roles: ["get-authors"] } })
    expect((await request(app, "GET", "/authors", { token: before })).status).toBe(200)
    const rotated = (await oidc.issuer.keys.generate("RS256")).kid
    // jose refetches the JWKS for an unknown kid once its cooldown (30 s) since the last fetch has
    // passed; move the clock past it rather than waiting.
    vi.useFakeTimers({ toFake: ["Date"] })
    try {
      vi.setSystemTime(Date.now() + 31_000)
      const after = await mint({ sub: "uuid-rotated", realm_access: { roles: ["get-authors"] } }, { kid: rotated })
      expect((await request(app, "GET", "/authors", { token: after })).status).toBe(200)
      const old = await mint({ sub: "uuid-old-key", realm_access: { roles: ["get-authors"] } }, { kid: firstKid })
      expect((await request(app, "GET", "/authors", { token: old })).status).toBe(200)
    } finally {
      vi.useRealTimers()
    }
  })

  it("an unreachable provider: /login → 503, while tokens with already-cached keys still verify", async () => {
    const fresh = await mint({ sub: "uuid-after-outage", realm_access: { roles: ["get-authors"] } })
    http.closeAllConnections()
    await new Promise((resolve) => http.close(resolve))
    const res = await request(app, "POST", "/login", { body: { username: "admin", password: "admin" } })
    expect(res).toMatchObject({ status: 503, body: { detail: "Identity provider unavailable" } })
    const refresh = await request(app, "POST", "/login/refresh", { body: { refresh_token: "anything" } })
    expect(refresh).toMatchObject({ status: 503, body: { detail: "Identity provider unavailable" } })
    expect((await request(app, "GET", "/authors", { token: fresh })).status).toBe(200)
    // Listen again (on the same port) so afterAll can close it.
    const port = Number(new URL(issuer).port)
    await new Promise<void>((resolve) => http.listen(port, "127.0.0.1", resolve))
  })
})
