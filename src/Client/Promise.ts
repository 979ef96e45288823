/**
 * The client for callers who do not use Effect: the same client as `makeClient` (Http.ts), its
 * author calls as Promises, and the `/web` client with the session's token. A call rejects with
 * what the Effect client fails with — the declared errors as their classes (`AuthorNameTaken`,
 * `Forbidden`, …, each with `_tag` and `detail`) — except the 422 body, which arrives as a
 * `ValidationError` (an `Error`, as every rejection should be).
 */
import { Effect, Schema } from "effect"
import type { TokenResponse } from "../Auth/Api.ts"
import type { Author as AuthorSchema, AuthorPage } from "../Domain/Author.ts"
import { type ApiClient, type AuthorDirectoryClient, type ClientOptions, makeClient } from "./Http.ts"
import { connectWs, type WsClient, type WsClientOptions } from "./Ws.ts"

type AuthorsClient = ApiClient["authors"]
type QueryOf<F extends (...args: never) => unknown> = NonNullable<Parameters<F>[0]> extends { readonly query: infer Q } ? Q : never

/** `GET /authors` filters: `id`, `name` (exact), `search` (case-insensitive substring). */
export type ListQuery = QueryOf<AuthorsClient["list"]>
/** `GET /authors/paginated`: `page`, `per_page`, `id`, `name`, `cursor` (a page's `meta.next_cursor`). */
export type PageQueryInput = QueryOf<AuthorsClient["paginated"]>
/** An author as the service returns it: `{ id, name, created_at }`. */
export type Author = typeof AuthorSchema.Type

/** A request the service refused as invalid (422): `detail` lists each problem with its location. */
export class ValidationError extends Schema.TaggedError<ValidationError>()("ValidationError", {
  detail: Schema.Array(Schema.Struct({
    type: Schema.String,
    loc: Schema.Array(Schema.Union([Schema.String, Schema.Number])),
    msg: Schema.String,
    input: Schema.Unknown
  }))
}) {}

type ValidationBody = ConstructorParameters<typeof ValidationError>[0]
const isValidationBody = (u: unknown): u is ValidationBody =>
  typeof u === "object" && u !== null && !(u instanceof Error) && "detail" in u && Array.isArray(u.detail)

/** Runs a call; a 422 body (the one declared failure that is no class) becomes a ValidationError. */
const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> =>
  Effect.runPromise(Effect.mapError(effect, (e) => (isValidationBody(e) ? new ValidationError(e) : e)))

export interface PromiseClient {
  /** `POST /login`; keeps the tokens (refreshed before they expire) for every later call. */
  readonly login: (username: string, password: string) => Promise<TokenResponse>
  /** Forgets the tokens. */
  readonly logout: () => void
  /** A valid access token, refreshed first if it is (about to be) expired. */
  readonly accessToken: () => Promise<string>
  readonly authors: {
    readonly list: (query?: ListQuery) => Promise<ReadonlyArray<Author>>
    readonly page: (query?: PageQueryInput) => Promise<AuthorPage>
    readonly get: (id: number) => Promise<Author>
    readonly create: (author: { readonly name: string }) => Promise<Author>
    readonly update: (id: number, author: { readonly name: string }) => Promise<Author>
    readonly delete: (id: number) => Promise<void>
  }
  /** The `/web` client on this service, authenticated with the session's (refreshed) token. */
  readonly connectWs: (options?: Omit<WsClientOptions, "url" | "token"> & Partial<Pick<WsClientOptions, "url" | "token">>) => Promise<WsClient>
  /** The Effect client underneath: every endpoint of the API, typed. */
  readonly effect: AuthorDirectoryClient
}

/** `const client = createClient({ baseUrl: "http://localhost:8000" }); await client.login(…)`. */
export const createClient = (options: ClientOptions): PromiseClient => {
  const client = Effect.runSync(makeClient(options))
  const authors = client.api.authors
  const accessToken = () => run(client.accessToken)
  return {
    login: (username, password) => run(client.login(username, password)),
    logout: () => Effect.runSync(client.logout),
    accessToken,
    authors: {
      list: (query = {}) => run(authors.list({ query })),
      page: (query = {}) => run(authors.paginated({ query })),
      get: (id) => run(authors.get({ params: { author_id: id } })),
      create: (author) => run(authors.create({ payload: { name: author.name } })),
      update: (id, author) => run(authors.update({ params: { author_id: id }, payload: { name: author.name } })),
      delete: (id) => run(Effect.asVoid(authors.remove({ params: { author_id: id } })))
    },
    connectWs: (ws = {}) => connectWs({ url: options.baseUrl, token: accessToken, ...ws }),
    effect: client
  }
}
