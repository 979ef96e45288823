/**
 * The authors HTTP handlers. Reads are answered with the text the `Authors` service gives (built
 * once per database read, kept by the read cache), each 200 with an `ETag`; a request whose
 * `If-None-Match` matches it gets 304 without a body (conditional reads). The generation the
 * request's rate check observed (`RequestContext.observed`, Http/FrontDoor.ts) makes the read
 * cacheable across instances (ReadCache.ts).
 *
 * ETags: a strong one from the body's content for an answer held whole (the same body has the
 * same ETag on every instance). A `GET /authors` longer than one batch is streamed, so its body
 * cannot be hashed before it is sent: its ETag is weak, built from the tag of the read (this
 * process's boot id, the query, the generation and epoch it observed), and matches only while no
 * write touched the list since, on the same instance. When no generation could be read (rate
 * limiting off or Redis down, with Redis; the LISTEN connection down; the cache off) that weak
 * ETag is unique to the response: it never matches, so such a list is always sent whole.
 */
import { Effect, Result, SchemaParser, Stream } from "effect"
import { HttpRouter, type HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { hash } from "node:crypto"
import { Api } from "../Api.ts"
import { hasRoles } from "../Auth/Rbac.ts"
import { AuthorPayload, type AuthorRow, authorRowsJson } from "../Domain/Author.ts"
import { getRequestContext, type RequestContext } from "../Domain/RequestContext.ts"
import { OperationRoles, type Role } from "../Domain/User.ts"
import { AuthorNotFound } from "../Errors.ts"
import { parseJson } from "../Http/ErrorResponse.ts"
import type { EarlyAnswer, EarlyClaim, EarlyStage } from "../Http/FrontDoor.ts"
import { Authors, type ListBatches } from "./Authors.ts"
import { answered, ifNoneMatch, notModified, ReadAnswer } from "./ReadAnswers.ts"
import { ReadCache } from "./ReadCache.ts"
import { type AuthorRead, authorRead, canonicalAuthorId, listRead, type ListRead, makeHttpReads, pageQueryRead } from "./Reads.ts"

const encoder = new TextEncoder()
const JSON_TYPE = "application/json"

/**
 * A created or renamed author: the row as the JSON `Author` encodes it (`authorRowsJson`, byte for
 * byte), written as is. The row comes from the database with the schema's shape, so HttpApi's
 * encoding would only check it again.
 */
const written = (row: AuthorRow, status: 200 | 201) =>
  HttpServerResponse.text(authorRowsJson([row]), { status, contentType: JSON_TYPE })

/**
 * GET /authors (unpaginated: docs/http-api.md#authors) longer than one batch: a JSON array written batch by batch
 * (chunked), byte for byte what encoding `Schema.Array(Author)` gives. The first batch was read
 * before the response exists, so a database failure there is the usual JSON error; a failure
 * later aborts the answer.
 */
const streamed = ({ first, rest }: ListBatches, etag: string) =>
  HttpServerResponse.stream(
    Stream.concat(
      Stream.make(`[${authorRowsJson(first)}`),
      Stream.concat(Stream.map(rest, (rows) => `,${authorRowsJson(rows)}`), Stream.make("]"))
    ).pipe(Stream.map((text) => encoder.encode(text))),
    { contentType: JSON_TYPE, headers: { etag } }
  )

export const layer = HttpApiBuilder.group(
  Api,
  "authors",
  Effect.fn(function*(handlers) {
    const authors = yield* Authors
    const cache = yield* ReadCache
    let unique = 0
    /** The weak ETag of a streamed list read under `tag` (see the header). */
    const weakEtag = (read: ListRead, tag: string | undefined) =>
      tag === undefined
        ? `W/"${cache.bootId}.u${++unique}"`
        : `W/"${cache.bootId}.${hash("sha256", `${read.key}\u0000${tag}`, "base64url").slice(0, 27)}"`
    /** The tag of a read starting now, from the generation the request's rate check observed. */
    const tagOf = (read: AuthorRead) => Effect.map(getRequestContext, (ctx) => cache.tag(read.scope, ctx?.observed))

    return handlers
      .handle("list", ({ query, request }) =>
        Effect.gen(function*() {
          const read = listRead(query)
          const tag = yield* tagOf(read)
          const ifNone = request.headers["if-none-match"]
          // A streamed list unchanged since the client's copy: no database read at all.
          if (tag !== undefined && ifNone !== undefined) {
            const etag = weakEtag(read, tag)
            if (ifNoneMatch(ifNone, etag, false)) return notModified(etag)
          }
          const result = yield* authors.readList(read.filters, tag)
          if (result instanceof ReadAnswer) return answered(result, ifNone)
          const etag = weakEtag(read, tag)
          return ifNoneMatch(ifNone, etag) ? notModified(etag) : streamed(result, etag)
        }))
      .handle("paginated", ({ query, request }) => {
        const read = pageQueryRead(query)
        return Effect.flatMap(tagOf(read), (tag) =>
          Effect.map(authors.readPage(read.filters, read.page, tag), (answer) => answered(answer, request.headers["if-none-match"])))
      })
      .handle("get", ({ params: { author_id }, request }) =>
        Effect.gen(function*() {
          const read = authorRead(author_id)
          const answer = yield* authors.readAuthor(read.id, yield* tagOf(read))
          if (!answer.found) return yield* Effect.fail(AuthorNotFound.of(author_id))
          return answered(answer, request.headers["if-none-match"])
        }))
      .handle("create", ({ payload }) => Effect.map(authors.create(payload.name), (row) => written(row, 201)))
      .handle("update", ({ params, payload }) => Effect.map(authors.update(params.author_id, payload.name), (row) => written(row, 200)))
      .handle("remove", ({ params }) => Effect.asVoid(authors.remove(params.author_id)))
  })
)

const decodePayload = SchemaParser.decodeUnknownResult(AuthorPayload)
/** `DELETE /authors/{author_id}`'s answer, as HttpApi gives `NoContent`. */
const NO_CONTENT = HttpServerResponse.empty({ status: 204 })

/**
 * The authors' early answers (docs/architecture.md#the-request-path), the front door's stage
 * (Http/FrontDoor.ts `EarlyStage`, wired in App.ts): requests answered before the router and
 * HttpApi, with the handlers' own answers — the same service calls, the same texts, ETags, 304s
 * and error bodies (failures go through the front door's error mapping, as the app's do).
 * - An author read (the read model, Reads.ts: the endpoints' schemas decode the request, so its
 *   key, scope and roles are the handler's): the answer the read cache holds under the request's
 *   tag, at once; else the service's read — except an unpaginated list that is not an id lookup
 *   (it may be streamed) and a conditional `GET /authors` (its weak ETags are the handler's).
 * - `POST /authors` and `PUT /authors/{id}` with a JSON body that decodes with the endpoint's own
 *   payload schema, and `DELETE /authors/{id}` (the id written canonically, as the read model reads
 *   it): the service's create (201, or 409 when the name exists), rename (200, 404 or 409) and
 *   delete (204 or 404).
 * Anything this stage does not decide exactly goes on to the app, which decides as always: a
 * caller without the role (the app's 401 or 403), a request or a body that does not decode (422),
 * another content type. A read's generation rides on the request's rate check whether or not the
 * stage answers (the handler reads it then).
 */
export const early: Effect.Effect<EarlyStage, never, ReadCache | Authors> = Effect.gen(function*() {
  const cache = yield* ReadCache
  const authors = yield* Authors
  const readOf = makeHttpReads(yield* HttpRouter.RouterConfig)
  const allowed = (ctx: RequestContext, roles: ReadonlyArray<Role>) => ctx.user !== undefined && hasRoles(ctx.user, roles)

  const read = (read: AuthorRead, request: HttpServerRequest.HttpServerRequest, ctx: RequestContext): EarlyAnswer | undefined => {
    if (!allowed(ctx, read.roles)) return undefined
    const ifNone = request.headers["if-none-match"]
    const tag = cache.tag(read.scope, ctx.observed)
    switch (read._tag) {
      case "Author": {
        const stored = tag === undefined ? undefined : cache.peek(read.key, tag)
        const found = (answer: ReadAnswer) => (answer.found ? Effect.succeed(answered(answer, ifNone)) : Effect.fail(AuthorNotFound.of(read.id)))
        return stored !== undefined ? found(stored) : Effect.flatMap(authors.readAuthor(read.id, tag), found)
      }
      case "Page": {
        const stored = tag === undefined ? undefined : cache.peek(read.key, tag)
        if (stored !== undefined) return answered(stored, ifNone)
        return Effect.map(authors.readPage(read.filters, read.page, tag), (answer) => answered(answer, ifNone))
      }
      case "List": {
        if (ifNone !== undefined) return undefined
        const stored = tag === undefined ? undefined : cache.peek(read.key, tag)
        if (stored !== undefined) return answered(stored, undefined)
        if (read.filters.name !== undefined || read.filters.search !== undefined || read.filters.id === undefined) return undefined
        return Effect.map(authors.readList(read.filters, tag), (result) => (result instanceof ReadAnswer ? answered(result, undefined) : undefined))
      }
    }
  }

  /** A write whose JSON body names an author: the body decoded with the endpoint's schema, else the app's 422. */
  const named = (
    roles: ReadonlyArray<Role>,
    write: (name: string) => Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>
  ) =>
  (request: HttpServerRequest.HttpServerRequest, ctx: RequestContext): EarlyAnswer | undefined => {
    if (!allowed(ctx, roles) || request.headers["content-type"]?.toLowerCase() !== JSON_TYPE) return undefined
    return Effect.flatMap(Effect.orElseSucceed(request.text, () => undefined), (text) => {
      const parsed = text === undefined ? undefined : parseJson(text)
      const payload = parsed?.ok === true ? decodePayload(parsed.value) : undefined
      return payload === undefined || Result.isFailure(payload) ? Effect.succeed(undefined) : write(payload.success.name)
    })
  }
  const creates = { generation: undefined, answer: named(OperationRoles.createAuthor, (name) => Effect.map(authors.create(name), (row) => written(row, 201))) }
  const changes = (method: string, url: string): EarlyClaim | undefined => {
    const id = canonicalAuthorId(url)
    if (id === undefined) return undefined
    if (method === "PUT") {
      return { generation: undefined, answer: named(OperationRoles.updateAuthor, (name) => Effect.map(authors.update(id, name), (row) => written(row, 200))) }
    }
    return {
      generation: undefined,
      answer: (_request, ctx) => (allowed(ctx, OperationRoles.deleteAuthor) ? Effect.as(authors.remove(id), NO_CONTENT) : undefined)
    }
  }

  return {
    claim: (method, template, url) => {
      if (method === "POST") return template === "/authors" && url === "/authors" ? creates : undefined
      if (method === "PUT" || method === "DELETE") return template === "/authors/{author_id}" ? changes(method, url) : undefined
      const found = readOf(method, template, url)
      return found === undefined
        ? undefined
        : { generation: cache.generationKey(found.scope), answer: (request, ctx) => read(found, request, ctx) }
    }
  }
})
