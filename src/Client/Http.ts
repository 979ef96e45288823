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
import { Context, Effect, Layer, Option, Schema, Semaphore, Stream } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "effect/http"
import { HttpApi, HttpApiClient, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware } from "effect/http-api"
import { Api, CommonResponses } from "../Api.ts"
import { Authentication } from "../Auth/Middleware.ts"
import type { TokenResponse } from "../Auth/Api.ts"
import { AuthorsApi, PageParams } from "../Authors/Api.ts"
import { AuthorPage } from "../Domain/Author.ts"
import { IntFromString } from "../Domain/Params.ts"
import { InvalidRefreshToken } from "../Errors.ts"

export { Api }
export {
  AuditLogNotFound,
  AuthorNameTaken,
  AuthorNotFound,
  CaptureRefused,
  Forbidden,
  IdentityProviderUnavailable,
  InternalError,
  InvalidCredentials,
  InvalidFilename,
  InvalidRefreshToken,
  PayloadTooLarge,
  RateLimited,
  ReportNotFound,
  TooManyFailedLogins,
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

/**
 * The query of `GET /authors/paginated` as a client writes it. The server's `PageParams` decodes
 * `cursor` into the last id seen, so a client built from `Api` alone would take that id, while
 * `meta.next_cursor` hands out the opaque string: here `cursor` stays that string, passed back as
 * it came, and `page` / `per_page` may be left out (the server's defaults, 1 and 20, apply).
 */
export const PageQuery = Schema.Struct({
  page: Schema.optionalKey(IntFromString),
  per_page: Schema.optionalKey(IntFromString),
  id: PageParams.fields.id,
  name: PageParams.fields.name,
  cursor: Schema.optional(Schema.String)
})
export type PageQuery = typeof PageQuery.Type

// The same query string on the wire as the server's declaration: a change to `PageParams` that
// this schema does not follow is a compile error here.
type SameType<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
const _sameWireFormat: SameType<typeof PageQuery.Encoded, typeof PageParams.Encoded> = true

/**
 * `GET /authors/paginated` for the client: the server's endpoint (its path, success and errors,
 * through the same `Authentication` and `CommonResponses` middleware) with `PageQuery` as its
 * query. The HTTP contract is unchanged; only the client's view of the cursor differs.
 */
const served = AuthorsApi.endpoints.paginated
const PagingApi = HttpApi.make("author-directory").add(
  HttpApiGroup.make("authors").add(
    HttpApiEndpoint.get(served.identifier, served.path, { query: PageQuery, success: AuthorPage })
  ).middleware(Authentication)
).middleware(CommonResponses)

type ServedClient = HttpApiClient.ForApi<typeof Api>
type PagingClient = HttpApiClient.ForApi<typeof PagingApi>["authors"]

/**
 * The client of the whole API, one property per group (`authors`, `login`, `audit-logs`, …), as
 * `HttpApiClient` builds it from `Api` — except `authors.paginated`, which takes `PageQuery`.
 */
export type ApiClient = Omit<ServedClient, "authors"> & {
  readonly authors: Omit<ServedClient["authors"], "paginated"> & PagingClient
}

/** The ways one page request can fail (declared errors as their classes, transport, decoding). */
export type PageError = Effect.Error<ReturnType<PagingClient["paginated"]>>

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
  /**
   * Every page of `GET /authors/paginated` with these filters, in id order: the first page, then
   * each `meta.next_cursor` passed back until it is null (keyset paging: the same cost at any
   * depth). Pages are fetched as the stream is read.
   */
  readonly authorPages: (query?: Omit<PageQuery, "page" | "cursor">) => Stream.Stream<typeof AuthorPage.Type, PageError>
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

    const [whole, paging] = yield* Effect.all([
      HttpApiClient.make(Api, { baseUrl: options.baseUrl }),
      HttpApiClient.make(PagingApi, { baseUrl: options.baseUrl })
    ]).pipe(Effect.provide(authenticationClient))
    const api: ApiClient = { ...whole, authors: { ...whole.authors, paginated: paging.authors.paginated } }

    // The state is the cursor to send: none for the first page.
    const authorPages = (query: Omit<PageQuery, "page" | "cursor"> = {}) =>
      Stream.paginate(Option.none<string>(), (cursor) =>
        Effect.map(
          api.authors.paginated({ query: Option.match(cursor, { onNone: () => query, onSome: (c) => ({ ...query, cursor: c }) }) }),
          (page) => [[page], Option.map(Option.fromNullishOr(page.meta.next_cursor), Option.some)] as const
        ))

    return {
      api,
      authorPages,
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
