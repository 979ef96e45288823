/**
 * The authors endpoints' status and body table, in memory: the HttpApi handlers with their
 * authentication middleware, the `Authors` service on the in-memory repository, and no port, no
 * database (HttpApiTest, as in effect's ai-docs). What the front door adds (request ids, rate
 * limits, the shape of parameter errors) is pinned by the integration tests on a running service.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { HttpClientRequest, type HttpClientResponse, HttpServer } from "effect/http"
import { HttpApiMiddleware, HttpApiTest } from "effect/http-api"
import { Api, CommonResponses } from "../../src/Api.ts"
import * as BearerAuth from "../../src/Auth/Authentication.ts"
import { Authentication } from "../../src/Auth/Middleware.ts"
import { TokenRejected, TokenVerifier } from "../../src/Auth/TokenVerifier.ts"
import { AuthorEvents, Authors } from "../../src/Authors/Authors.ts"
import * as AuthorsHttp from "../../src/Authors/Http.ts"
import { ReadCache } from "../../src/Authors/ReadCache.ts"
import { AuthorRepo } from "../../src/Authors/Repo.ts"
import { Cursor } from "../../src/Domain/Pagination.ts"
import { Roles } from "../../src/Domain/User.ts"

/** Tokens are the users' names; any other token is refused like a bad signature. */
const USERS: Record<string, ReadonlyArray<string>> = {
  admin: Roles,
  reader: ["get-authors"],
  nobody: []
}

const Verifier = Layer.succeed(TokenVerifier, {
  verify: (token) => {
    const roles = USERS[token]
    return roles === undefined
      ? Effect.fail(new TokenRejected({ reason: "invalid" }))
      : Effect.succeed({ id: `id-${token}`, username: token, roles, expiresAt: Math.floor(Date.now() / 1000) + 300 })
  }
})

/** A fresh, empty directory per test. */
const Handlers = AuthorsHttp.layer.pipe(
  Layer.provide(Authors.layer),
  Layer.provide([AuthorRepo.layerMemory, AuthorEvents.layerNone, ReadCache.layerNone]),
  Layer.provideMerge(BearerAuth.layer),
  Layer.provideMerge(CommonResponses.layer),
  Layer.provide(Verifier),
  Layer.provideMerge(HttpServer.layerServices)
)

/** The client's side of the authentication middleware: the bearer token, and any other header to send. */
const as = (token: string | undefined, headers: Record<string, string> = {}) =>
  HttpApiMiddleware.layerClient(Authentication, ({ next, request }) => {
    const withHeaders = HttpClientRequest.setHeaders(request, headers)
    return next(token === undefined ? withHeaders : HttpClientRequest.bearerToken(withHeaders, token))
  })

const makeClient = HttpApiTest.groups(Api, ["authors"])
type Client = Effect.Success<typeof makeClient>

interface Answer {
  readonly status: number
  readonly body: unknown
  readonly etag: string | undefined
}

const answer = (response: HttpClientResponse.HttpClientResponse) =>
  Effect.map(response.text, (text): Answer => ({
    status: response.status,
    body: text === "" ? undefined : JSON.parse(text),
    etag: response.headers["etag"]
  }))

/**
 * One request as `token`, answered raw (status, body, ETag). The client takes its middleware
 * when it is made, so each caller gets its own client on the same handlers.
 */
const call = (
  token: string | undefined,
  request: (client: Client) => Effect.Effect<HttpClientResponse.HttpClientResponse, unknown>,
  headers?: Record<string, string>
) =>
  makeClient.pipe(
    Effect.provide(as(token, headers)),
    Effect.flatMap((client) => Effect.orDie(request(client))),
    Effect.flatMap(answer)
  )

const raw = { responseMode: "response-only" } as const

/** A test on its own empty directory. */
const inMemory = <A, E, R>(body: Effect.Effect<A, E, R>) => body.pipe(Effect.scoped, Effect.provide(Handlers))

const created = (name: string) =>
  Effect.flatMap(call("admin", (c) => c.authors.create({ payload: { name }, ...raw })), ({ body }) =>
    Effect.succeed(body as { readonly id: number; readonly name: string; readonly created_at: string }))

describe("authors handlers, in memory", () => {
  it.effect("create: 201 with the author (name trimmed, created_at to the microsecond); a taken name is 409", () =>
    inMemory(
      Effect.gen(function*() {
        const first = yield* call("admin", (c) => c.authors.create({ payload: { name: "  Ursula  " }, ...raw }))
        expect(first.status).toBe(201)
        expect(first.body).toMatchObject({ id: 1, name: "Ursula" })
        expect((first.body as { created_at: string }).created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/)
        expect(yield* call("admin", (c) => c.authors.create({ payload: { name: "Ursula" }, ...raw }))).toMatchObject({
          status: 409,
          body: { detail: "Author with name Ursula already exists" }
        })
        // Names are unique as written: another case is another name.
        expect((yield* call("admin", (c) => c.authors.create({ payload: { name: "ursula" }, ...raw }))).status).toBe(201)
      })))

  it.effect("get: 200 with an ETag, 304 when If-None-Match names it, 404 for an id no author has", () =>
    inMemory(
      Effect.gen(function*() {
        const author = yield* created("Octavia")
        const got = yield* call("reader", (c) => c.authors.get({ params: { author_id: author.id }, ...raw }))
        expect(got).toMatchObject({ status: 200, body: author })
        expect(got.etag).toMatch(/^"/)
        const again = yield* call("reader", (c) => c.authors.get({ params: { author_id: author.id }, ...raw }), {
          "if-none-match": got.etag!
        })
        expect(again).toEqual({ status: 304, body: undefined, etag: got.etag })
        for (const id of [987654, 2_147_483_648]) {
          expect(yield* call("reader", (c) => c.authors.get({ params: { author_id: id }, ...raw }))).toMatchObject({
            status: 404,
            body: { detail: `Author with ID ${id} not found` }
          })
        }
      })))

  it.effect("update: 200 renamed, the same name again 200, a taken name 409, an unknown id 404", () =>
    inMemory(
      Effect.gen(function*() {
        const a = yield* created("A")
        yield* created("Taken")
        const rename = (id: number, name: string) => call("admin", (c) => c.authors.update({ params: { author_id: id }, payload: { name }, ...raw }))
        expect(yield* rename(a.id, "B")).toMatchObject({ status: 200, body: { id: a.id, name: "B", created_at: a.created_at } })
        expect((yield* rename(a.id, "B")).status).toBe(200)
        expect(yield* rename(a.id, "Taken")).toMatchObject({ status: 409, body: { detail: "Author with name Taken already exists" } })
        expect(yield* rename(987654, "Taken")).toMatchObject({ status: 404, body: { detail: "Author with ID 987654 not found" } })
      })))

  it.effect("remove: 204 without a body, then 404", () =>
    inMemory(
      Effect.gen(function*() {
        const a = yield* created("Gone")
        const remove = () => call("admin", (c) => c.authors.remove({ params: { author_id: a.id }, ...raw }))
        expect(yield* remove()).toEqual({ status: 204, body: undefined, etag: undefined })
        expect(yield* remove()).toMatchObject({ status: 404, body: { detail: `Author with ID ${a.id} not found` } })
      })))

  it.effect("list: by id; id and name exact, search a case-insensitive substring, combined with AND", () =>
    inMemory(
      Effect.gen(function*() {
        for (const name of ["Le Guin", "Butler", "le carré", "Banks"]) yield* created(name)
        const names = (query: { id?: number; name?: string; search?: string }) =>
          Effect.map(call("reader", (c) => c.authors.list({ query, ...raw })), ({ body, status }) => {
            expect(status).toBe(200)
            return (body as ReadonlyArray<{ name: string }>).map((a) => a.name)
          })
        expect(yield* names({})).toEqual(["Le Guin", "Butler", "le carré", "Banks"])
        expect(yield* names({ search: "LE" })).toEqual(["Le Guin", "Butler", "le carré"])
        expect(yield* names({ name: "Butler" })).toEqual(["Butler"])
        expect(yield* names({ name: "butler" })).toEqual([])
        expect(yield* names({ id: 2, search: "le" })).toEqual(["Butler"])
        expect(yield* names({ id: 3, name: "Butler" })).toEqual([])
      })))

  it.effect("paginated: offset pages with their meta, then the same rows by cursor", () =>
    inMemory(
      Effect.gen(function*() {
        for (const name of ["a", "b", "c", "d", "e"]) yield* created(name)
        const page = (query: { page: number; per_page: number; cursor?: number; name?: string }) =>
          Effect.map(call("reader", (c) => c.authors.paginated({ query, ...raw })), ({ body, status }) => {
            expect(status).toBe(200)
            return body as { items: ReadonlyArray<{ id: number; name: string }>; meta: Record<string, unknown> }
          })
        const second = yield* page({ page: 2, per_page: 2 })
        expect(second.items.map((a) => a.name)).toEqual(["c", "d"])
        expect(second.meta).toMatchObject({ page: 2, per_page: 2, total: 5, pages: 3, has_more: true })
        const last = yield* page({ page: 3, per_page: 2 })
        expect(last.items.map((a) => a.name)).toEqual(["e"])
        expect(last.meta).toMatchObject({ total: 5, has_more: false, next_cursor: null })
        expect((yield* page({ page: 9, per_page: 2 })).items).toEqual([])
        const first = yield* page({ page: 1, per_page: 2 })
        expect(first.meta).toMatchObject({ page: 1, per_page: 2 })
        // The client sends the cursor as the API spells it: `next_cursor`, decoded here and encoded again.
        const cursor = Schema.decodeUnknownSync(Cursor)(first.meta["next_cursor"])
        const byCursor = yield* page({ page: 1, per_page: 2, cursor })
        expect(byCursor.items.map((a) => a.name)).toEqual(["c", "d"])
        expect(byCursor.meta).toMatchObject({ total: 5, has_more: true })
        expect((yield* page({ page: 1, per_page: 2, name: "d" })).meta).toMatchObject({ total: 1, pages: 1, has_more: false })
      })))

  it.effect("authentication and roles: 401 without or with a bad token, 403 without the operation's role", () =>
    inMemory(
      Effect.gen(function*() {
        const list = (token: string | undefined) => call(token, (c) => c.authors.list({ query: {}, ...raw }))
        expect(yield* list(undefined)).toMatchObject({ status: 401, body: { detail: "Not authenticated" } })
        expect(yield* list("forged")).toMatchObject({ status: 401, body: { detail: "Could not validate credentials" } })
        expect(yield* list("nobody")).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
        const create = yield* call("reader", (c) => c.authors.create({ payload: { name: "x" }, ...raw }))
        expect(create).toMatchObject({ status: 403, body: { detail: "Forbidden" } })
      })))
})
