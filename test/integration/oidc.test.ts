/**
 * The OIDC identity path against oauth2-mock-server playing a Keycloak realm on loopback
 * (docs/deployment.md#identity-provider): password and refresh grants through /login, role claims, issuer/audience/
 * exp/nbf checks (with clock tolerance), asymmetric algorithms only, key rotation, an unreachable
 * provider (keys kept), and the audience checked per APP_ENV / OIDC_AUDIENCE.
 */
import { Option } from "effect"
import { SignJWT } from "jose"
import { randomUUID } from "node:crypto"
import { readFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { OAuth2Server } from "oauth2-mock-server"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
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
/** Requests that reached the mock's token endpoint. */
let tokenRequests = 0
/** Refresh tokens the mock handed out, by user (the mock itself accepts any). */
const refreshTokens = new Map<string, string>()

const form = (req: unknown) => (req as { body: Record<string, string | undefined> }).body

/** The app's log lines, and a way to await the next one saying something. */
const logWaiters = new Set<{ readonly text: string; readonly resolve: () => void }>()
const logSink = (line: string) => {
  for (const waiter of logWaiters) {
    if (line.includes(waiter.text)) {
      logWaiters.delete(waiter)
      waiter.resolve()
    }
  }
}
const nextLogLine = (text: string) => new Promise<void>((resolve) => logWaiters.add({ text, resolve }))

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
    if (req.url === `${KC}/token`) tokenRequests++
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
    },
    // A refetch that fails and keeps the keys is a debug line (its outage is logged once).
    logLevel: "Debug",
    logger: layerLoggerTo("json", logSink)
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

  it("failed logins for one username: after LOGIN_MAX_FAILURES (10), 429 without asking the provider", async () => {
    for (let i = 0; i < 10; i++) {
      const res = await request(app, "POST", "/login", { body: { username: "mallory", password: `guess-${i}` } })
      expect(res).toMatchObject({ status: 401, body: { detail: "Invalid credentials" } })
    }
    const before = tokenRequests
    const res = await request(app, "POST", "/login", { body: { username: "Mallory", password: "guess-10" } })
    expect(res).toMatchObject({ status: 429, body: { detail: "Too many failed login attempts" } })
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    expect(tokenRequests).toBe(before)
  })

  it("exp, nbf and iat allow 5 s of clock skew between the provider and the service, no more", async () => {
    const now = Math.floor(Date.now() / 1000)
    const skewed = [
      await mint({ sub: "uuid-skew-exp", realm_access: { roles: ["get-authors"] } }, { expiresIn: -2 }),
      await mint({ sub: "uuid-skew-nbf", realm_access: { roles: ["get-authors"] }, nbf: now + 3 }),
      await mint({ sub: "uuid-skew-iat", realm_access: { roles: ["get-authors"] }, iat: now + 3 })
    ]
    for (const token of skewed) expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
    const beyond = await mint({ sub: "uuid-skew-beyond", realm_access: { roles: ["get-authors"] } }, { expiresIn: -30 })
    expect(await request(app, "GET", "/authors", { token: beyond })).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } })
  })

  it("an unreachable provider: /login → 503, and tokens keep verifying with the last keys fetched, long past their cache age", async () => {
    // The keys are cached: a token verified just now.
    const before = await mint({ sub: "uuid-before-outage", realm_access: { roles: ["get-authors"] } })
    expect((await request(app, "GET", "/authors", { token: before })).status).toBe(200)
    const port = Number(new URL(issuer).port)
    http.closeAllConnections()
    await new Promise((resolve) => http.close(resolve))
    try {
      const res = await request(app, "POST", "/login", { body: { username: "admin", password: "admin" } })
      expect(res).toMatchObject({ status: 503, body: { detail: "Identity provider unavailable" } })
      const refresh = await request(app, "POST", "/login/refresh", { body: { refresh_token: "anything" } })
      expect(refresh).toMatchObject({ status: 503, body: { detail: "Identity provider unavailable" } })
      // The keys' cache age is 10 minutes: move the clock (the injected one: `Date`, which the
      // key cache reads) well past it, several times, rather than waiting. Each time a refetch is
      // due: the token is checked with the keys at hand, the refetch fails, and the service says
      // it keeps the keys — awaited, so each next token is verified after a failed refetch. Each
      // token is new, so it is verified against the keys, not found in the verified-token cache.
      const start = Date.now()
      const unpublished = (await oidc.issuer.keys.generate("RS256")).kid
      vi.useFakeTimers({ toFake: ["Date"] })
      try {
        for (const minutes of [15, 45, 180]) {
          vi.setSystemTime(start + minutes * 60_000)
          const keptKeys = nextLogLine("JWKS refresh failed; keeping the cached keys")
          const token = await mint({ sub: `uuid-outage-${minutes}`, realm_access: { roles: ["get-authors"] } })
          const during = await request(app, "GET", "/authors", { token })
          expect(during.status, `${minutes} minutes into the outage`).toBe(200)
          await keptKeys
        }
        const after = await mint({ sub: "uuid-after-failed-refetches", realm_access: { roles: ["get-authors"] } })
        expect((await request(app, "GET", "/authors", { token: after })).status).toBe(200)
        // A key the service never fetched cannot be fetched now: such a token is refused.
        const unknownKey = await mint({ sub: "uuid-unknown-key", realm_access: { roles: ["get-authors"] } }, { kid: unpublished })
        expect(await request(app, "GET", "/authors", { token: unknownKey })).toMatchObject({
          status: 401,
          body: { detail: "Could not validate credentials" }
        })
      } finally {
        vi.useRealTimers()
      }
    } finally {
      // Listen again (on the same port) so the tests after this one and afterAll find it.
      await new Promise<void>((resolve) => http.listen(port, "127.0.0.1", resolve))
    }
  })

  it("the shipped Keycloak realm maps the client id into its access tokens' audience", () => {
    const realm = JSON.parse(readFileSync("deploy/keycloak/author-directory-realm.json", "utf8")) as {
      clients: Array<{ clientId: string; protocolMappers?: Array<{ protocolMapper: string; config: Record<string, string> }> }>
    }
    const client = realm.clients.find((c) => c.clientId === "author-directory")
    const mapper = client?.protocolMappers?.find((m) => m.protocolMapper === "oidc-audience-mapper")
    expect(mapper?.config).toMatchObject({ "included.client.audience": "author-directory", "access.token.claim": "true" })
  })
})

/** docs/deployment.md#identity-provider: the audience checked, per APP_ENV and OIDC_AUDIENCE. */
describe("token audience", () => {
  const apps: Array<TestApp> = []
  const start = async (appEnv: "development" | "production", audience: Option.Option<string>) => {
    const started = await startTestApp({
      config: { rateLimitEnabled: false, appEnv, oidcIssuerUrl: Option.some(issuer), oidcClientId: CLIENT_ID, oidcAudience: audience }
    })
    apps.push(started)
    return started
  }
  afterAll(async () => {
    await Promise.all(apps.map((a) => a.close()))
  })
  const statusWith = async (target: TestApp, aud: string | ReadonlyArray<string> | undefined) => {
    const token = await mint({ sub: `uuid-aud-${randomUUID()}`, realm_access: { roles: ["get-authors"] }, aud })
    const res = await request(target, "GET", "/authors", { token })
    if (res.status === 401) expect(res.body).toEqual({ detail: "Could not validate credentials" })
    return res.status
  }

  it("production, OIDC_AUDIENCE unset: aud must contain OIDC_CLIENT_ID", async () => {
    const production = await start("production", Option.none())
    expect(await statusWith(production, CLIENT_ID)).toBe(200)
    expect(await statusWith(production, ["account", CLIENT_ID])).toBe(200)
    expect(await statusWith(production, AUDIENCE)).toBe(401)
    expect(await statusWith(production, ["account"])).toBe(401)
    expect(await statusWith(production, undefined)).toBe(401)
  })

  it("production, OIDC_AUDIENCE=none: no audience check", async () => {
    const unchecked = await start("production", Option.some("none"))
    expect(await statusWith(unchecked, "account")).toBe(200)
    expect(await statusWith(unchecked, undefined)).toBe(200)
  })

  it("development, OIDC_AUDIENCE unset: no audience check", async () => {
    const development = await start("development", Option.none())
    expect(await statusWith(development, "account")).toBe(200)
    expect(await statusWith(development, undefined)).toBe(200)
  })
})
