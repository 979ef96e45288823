/**
 * The typed HTTP client: built by `HttpApiClient.make` from the very `Api` the service serves, so
 * every path, payload, success and error type is checked at compile time against the server's
 * declaration. Errors the API declares come back as their classes (`AuthorNameTaken`,
 * `Forbidden`, `Unauthenticated`, …) in the error channel.
 *
 * The bearer token is the client side of the `Authentication` middleware
 * (`HttpApiMiddleware.layerClient`): it reads the access token from a `TokenStore`, refreshes it
 * with `POST /login/refresh` shortly before it expires, and sets `Authorization: Bearer …`.
 */
import { Context, Effect, Layer, Schema, Semaphore } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "effect/http"
import { HttpApiClient, HttpApiMiddleware } from "effect/http-api"
import { Api } from "../Api.ts"
import { Authentication } from "../Auth/Authentication.ts"
import type { TokenResponse } from "../Auth/IdentityProvider.ts"
import { InvalidRefreshToken } from "../Errors.ts"

export { Api }
export {
  AuthorNameTaken,
  AuthorNotFound,
  Forbidden,
  IdentityProviderUnavailable,
  InvalidCredentials,
  InvalidRefreshToken,
  PayloadTooLarge,
  RateLimited,
  Unauthenticated
} from "../Errors.ts"
export type { TokenResponse }

/** The tokens of a session, with absolute expiry times (ms since the epoch, by the local clock). */
export interface Tokens {
  readonly accessToken: string
  readonly refreshToken: string
  readonly accessExpiresAt: number
  readonly refreshExpiresAt: number
}

/** Where the client keeps its tokens: in memory by default; any storage can implement it. */
export interface TokenStore {
  readonly get: () => Tokens | undefined
  readonly set: (tokens: Tokens | undefined) => void
}

export const memoryTokenStore = (initial?: Tokens): TokenStore => {
  let tokens = initial
  return { get: () => tokens, set: (next) => void (tokens = next) }
}

export const tokensFrom = (response: TokenResponse, now = Date.now()): Tokens => ({
  accessToken: response.access_token,
  refreshToken: response.refresh_token,
  accessExpiresAt: now + response.expires_in * 1000,
  refreshExpiresAt: now + response.refresh_expires_in * 1000
})

/** No session: `login` was never called, or the refresh token is gone or expired. */
export class NotLoggedIn extends Schema.TaggedError<NotLoggedIn>()("NotLoggedIn", {
  detail: Schema.String
}) {}

export interface ClientOptions {
  /** The service, e.g. `http://localhost:8000`. */
  readonly baseUrl: string
  /** Defaults to an in-memory store. */
  readonly tokenStore?: TokenStore
  /** Refresh when the access token expires within this many seconds (default 30). */
  readonly refreshBeforeSeconds?: number
  /** Replaces `FetchHttpClient` (e.g. NodeHttpClient, or a client with retries). */
  readonly httpClient?: Layer.Layer<HttpClient.HttpClient>
}

/** The client of the whole API, one property per group (`authors`, `login`, `audit-logs`, …). */
export type ApiClient = HttpApiClient.ForApi<typeof Api>

export interface AuthorDirectoryClient {
  /** Every endpoint, typed from `Api`: `client.api.authors.create({ payload: { name } })`. */
  readonly api: ApiClient
  readonly tokens: TokenStore
  /** `POST /login`; stores the tokens. */
  readonly login: (username: string, password: string) => Effect.Effect<
    TokenResponse,
    Effect.Error<ReturnType<ApiClient["login"]["login"]>>
  >
  /** `POST /login/refresh` with the stored refresh token; stores the new tokens. */
  readonly refresh: Effect.Effect<
    TokenResponse,
    NotLoggedIn | Effect.Error<ReturnType<ApiClient["login"]["refresh"]>>
  >
  /** A valid access token, refreshed first if it is (about to be) expired — e.g. for the WS client. */
  readonly accessToken: Effect.Effect<string, NotLoggedIn | Effect.Error<ReturnType<ApiClient["login"]["refresh"]>>>
  /** Forgets the tokens. */
  readonly logout: Effect.Effect<void>
}

export const makeClient = (options: ClientOptions): Effect.Effect<AuthorDirectoryClient> =>
  Effect.gen(function*() {
    const store = options.tokenStore ?? memoryTokenStore()
    const marginMs = (options.refreshBeforeSeconds ?? 30) * 1000
    // The login group carries no Authentication middleware: its client needs no token.
    const loginClient = yield* HttpApiClient.group(Api, {
      group: "login",
      httpClient: yield* HttpClient.HttpClient,
      baseUrl: options.baseUrl
    })
    // One refresh at a time: concurrent calls with an expiring token share it.
    const refreshing = yield* Semaphore.make(1)

    const refresh = refreshing.withPermits(1)(
      Effect.gen(function*() {
        const current = store.get()
        if (current === undefined || current.refreshExpiresAt <= Date.now()) {
          return yield* new NotLoggedIn({ detail: "No valid refresh token: log in" })
        }
        const response = yield* loginClient.refresh({ payload: { refresh_token: current.refreshToken } }).pipe(
          Effect.tapError((error) =>
            Effect.sync(() => {
              if (error instanceof InvalidRefreshToken) store.set(undefined)
            })
          )
        )
        store.set(tokensFrom(response))
        return response
      })
    )

    const expiring = (tokens: Tokens) => tokens.accessExpiresAt - marginMs <= Date.now()

    const accessToken = Effect.gen(function*() {
      const tokens = store.get()
      if (tokens === undefined) return yield* new NotLoggedIn({ detail: "Not logged in" })
      if (!expiring(tokens)) return tokens.accessToken
      // Another caller may have refreshed while this one waited for the permit.
      const after = yield* refreshing.withPermits(1)(Effect.sync(() => store.get()))
      if (after !== undefined && !expiring(after)) return after.accessToken
      return (yield* refresh).access_token
    })

    // The client side of the Authentication middleware. Without a usable token the request goes
    // out without one and the server's typed 401 (`Unauthenticated`) comes back.
    const authenticationClient = HttpApiMiddleware.layerClient(Authentication, ({ next, request }) =>
      Effect.gen(function*() {
        const token = yield* accessToken.pipe(
          Effect.catch(() => Effect.sync(() => store.get()?.accessToken))
        )
        return yield* next(token === undefined ? request : HttpClientRequest.bearerToken(request, token))
      })
    )

    const api = yield* HttpApiClient.make(Api, { baseUrl: options.baseUrl }).pipe(
      Effect.provide(authenticationClient)
    )

    return {
      api,
      tokens: store,
      login: (username, password) =>
        loginClient.login({ payload: { username, password } }).pipe(
          Effect.tap((response) => Effect.sync(() => store.set(tokensFrom(response))))
        ),
      refresh,
      accessToken,
      logout: Effect.sync(() => store.set(undefined))
    } satisfies AuthorDirectoryClient
  }).pipe(Effect.provide(options.httpClient ?? FetchHttpClient.layer))

/** The client as a service, for Effect programs: `Layer.provide(AuthorDirectory.layer({ baseUrl }))`. */
export class AuthorDirectory extends Context.Service<AuthorDirectory, AuthorDirectoryClient>()("Client/AuthorDirectory") {
  static readonly layer = (options: ClientOptions): Layer.Layer<AuthorDirectory> =>
    Layer.effect(AuthorDirectory, makeClient(options))
}
