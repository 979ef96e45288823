/**
 * The login endpoints' status and body table, in memory: the thin handler (Auth/Http.ts) over the
 * `Login` service (throttle, provider call, audit) with a stand-in provider, the in-process rate
 * limiter and no port (HttpApiTest). The refused attempt's Retry-After comes from the error table.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { type HttpClientResponse, HttpServer } from "effect/http"
import { HttpApiMiddleware, HttpApiTest } from "effect/http-api"
import { Api, CommonResponses } from "../../src/Api.ts"
import { AuditLog } from "../../src/AuditLogs/AuditLog.ts"
import type { TokenResponse } from "../../src/Auth/Api.ts"
import * as LoginHttp from "../../src/Auth/Http.ts"
import * as BearerAuth from "../../src/Auth/Authentication.ts"
import { IdentityProvider } from "../../src/Auth/IdentityProvider.ts"
import { Authentication } from "../../src/Auth/Middleware.ts"
import { TokenRejected, TokenVerifier } from "../../src/Auth/TokenVerifier.ts"
import { Login } from "../../src/Auth/Login.ts"
import { AppConfig } from "../../src/Config.ts"
import { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../../src/Errors.ts"
import { RateLimiter } from "../../src/RateLimit/RateLimiter.ts"

const TOKENS: TokenResponse = {
  access_token: "not-a-jwt",
  expires_in: 300,
  refresh_expires_in: 1800,
  refresh_token: "refresh",
  token_type: "Bearer"
}

/** Password "right" logs in; user "down" finds the provider unreachable. */
const Provider = Layer.succeed(IdentityProvider, {
  kind: "builtin",
  login: (username, password) =>
    username === "down"
      ? Effect.fail(IdentityProviderUnavailable.instance)
      : password === "right"
      ? Effect.succeed(TOKENS)
      : Effect.fail(InvalidCredentials.instance),
  refresh: (token) => (token === "refresh" ? Effect.succeed(TOKENS) : Effect.fail(InvalidRefreshToken.instance))
})

const Handlers = LoginHttp.layer.pipe(
  Layer.provide(Login.layer),
  Layer.provide([Provider, AuditLog.layerNone, RateLimiter.layerMemory]),
  Layer.provide(AppConfig.layerTest({ loginMaxFailures: 2, loginFailureWindowSeconds: 600, rateLimitFailMode: "open" })),
  Layer.provideMerge(CommonResponses.layer),
  Layer.provideMerge(HttpServer.layerServices),
  // The test client is made for the whole API, whose other groups take a bearer token (none valid here).
  Layer.provideMerge(BearerAuth.layer.pipe(Layer.provide(Layer.succeed(TokenVerifier, {
    verify: () => Effect.fail(new TokenRejected({ reason: "invalid" }))
  })))),
  Layer.provideMerge(HttpApiMiddleware.layerClient(Authentication, ({ next, request }) => next(request)))
)

const makeClient = HttpApiTest.groups(Api, ["login"])
type Client = Effect.Success<typeof makeClient>
const raw = { responseMode: "response-only" } as const

const call = (request: (client: Client) => Effect.Effect<HttpClientResponse.HttpClientResponse, unknown>) =>
  makeClient.pipe(
    Effect.flatMap((client) => Effect.orDie(request(client))),
    Effect.flatMap((response) =>
      Effect.map(response.text, (text) => ({ status: response.status, body: JSON.parse(text) as unknown, retryAfter: response.headers["retry-after"] }))
    )
  )

const login = (username: string, password: string) => call((c) => c.login.login({ payload: { username, password }, ...raw }))

const inMemory = <A, E, R>(body: Effect.Effect<A, E, R>) => body.pipe(Effect.scoped, Effect.provide(Handlers))

describe("login handlers, in memory", () => {
  it.effect("200 with the provider's tokens; 401 for wrong credentials; 503 when the provider is unreachable", () =>
    inMemory(Effect.gen(function*() {
      expect(yield* login("ann", "right")).toEqual({ status: 200, body: TOKENS, retryAfter: undefined })
      expect(yield* login("ann", "wrong")).toEqual({ status: 401, body: { detail: "Invalid credentials" }, retryAfter: undefined })
      expect(yield* login("down", "right")).toEqual({ status: 503, body: { detail: "Identity provider unavailable" }, retryAfter: undefined })
    })))

  it.effect("after LOGIN_MAX_FAILURES failures for a username: 429 with Retry-After, the password not checked; other users unaffected", () =>
    inMemory(Effect.gen(function*() {
      expect((yield* login("bob", "wrong")).status).toBe(401)
      expect((yield* login("BOB", "wrong")).status).toBe(401)
      expect(yield* login("bob", "right")).toEqual({ status: 429, body: { detail: "Too many failed login attempts" }, retryAfter: "600" })
      expect((yield* login("ann", "right")).status).toBe(200)
    })))

  it.effect("a successful login does not use up the failure budget", () =>
    inMemory(Effect.gen(function*() {
      for (let i = 0; i < 5; i++) expect((yield* login("cy", "right")).status).toBe(200)
      expect((yield* login("cy", "wrong")).status).toBe(401)
    })))

  it.effect("refresh: 200 with new tokens, 401 for a refresh token the provider refuses", () =>
    inMemory(Effect.gen(function*() {
      expect(yield* call((c) => c.login.refresh({ payload: { refresh_token: "refresh" }, ...raw }))).toMatchObject({ status: 200, body: TOKENS })
      expect(yield* call((c) => c.login.refresh({ payload: { refresh_token: "stale" }, ...raw }))).toMatchObject({
        status: 401,
        body: { detail: "Invalid refresh token" }
      })
    })))
})
