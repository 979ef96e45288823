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
import { Effect, Option, Stream } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { hash } from "node:crypto"
import { Api } from "../Api.ts"
import { type AuthorFilters, type AuthorRow, authorRowsJson } from "../Domain/Author.ts"
import { getRequestContext } from "../Domain/RequestContext.ts"
import { AuthorNotFound } from "../Errors.ts"
import { Authors, type ListBatches } from "./Authors.ts"
import { listKey, ReadAnswer } from "./ReadAnswers.ts"
import { ReadCache, scopeOf, scopeOfId } from "./ReadCache.ts"

const encoder = new TextEncoder()
const JSON_TYPE = "application/json"

/**
 * Whether an `If-None-Match` value names `etag` (weak comparison: `W/` is ignored). `*` matches any
 * current representation, unless `star` is false (a check made before there is one).
 */
export const ifNoneMatch = (header: string | undefined, etag: string, star = true): boolean => {
  if (header === undefined) return false
  const opaque = etag.startsWith("W/") ? etag.slice(2) : etag
  for (const part of header.split(",")) {
    const candidate = part.trim()
    if ((star && candidate === "*") || candidate === opaque || (candidate.startsWith("W/") && candidate.slice(2) === opaque)) return true
  }
  return false
}

const notModified = (etag: string) => HttpServerResponse.empty({ status: 304, headers: { etag } })

/** A read's answer: the stored text with its ETag, or 304 when `If-None-Match` names it (the front door's cached reads too). */
export const answered = (answer: ReadAnswer, ifNone: string | undefined) =>
  ifNoneMatch(ifNone, answer.etag)
    ? notModified(answer.etag)
    : HttpServerResponse.text(answer.body, { contentType: JSON_TYPE, headers: { etag: answer.etag } })

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
    const weakEtag = (filters: AuthorFilters, tag: string | undefined) =>
      tag === undefined
        ? `W/"${cache.bootId}.u${++unique}"`
        : `W/"${cache.bootId}.${hash("sha256", `${listKey(filters)}\u0000${tag}`, "base64url").slice(0, 27)}"`
    const tagOf = (filters: AuthorFilters) => Effect.map(getRequestContext, (ctx) => cache.tag(scopeOf(filters), ctx?.observed))

    return handlers
      .handle("list", ({ query, request }) =>
        Effect.gen(function*() {
          const tag = yield* tagOf(query)
          const ifNone = request.headers["if-none-match"]
          // A streamed list unchanged since the client's copy: no database read at all.
          if (tag !== undefined && ifNone !== undefined) {
            const etag = weakEtag(query, tag)
            if (ifNoneMatch(ifNone, etag, false)) return notModified(etag)
          }
          const result = yield* authors.readList(query, tag)
          if (result instanceof ReadAnswer) return answered(result, ifNone)
          const etag = weakEtag(query, tag)
          return ifNoneMatch(ifNone, etag) ? notModified(etag) : streamed(result, etag)
        }))
      .handle("paginated", ({ query: { cursor, page, per_page, ...filters }, request }) =>
        Effect.flatMap(tagOf(filters), (tag) =>
          Effect.map(
            authors.readPage(filters, { page, perPage: per_page, cursor: Option.fromUndefinedOr(cursor) }, tag),
            (answer) => answered(answer, request.headers["if-none-match"])
          )))
      .handle("get", ({ params: { author_id }, request }) =>
        Effect.gen(function*() {
          const ctx = yield* getRequestContext
          const answer = yield* authors.readAuthor(author_id, cache.tag(scopeOfId(author_id), ctx?.observed))
          if (!answer.found) return yield* Effect.fail(AuthorNotFound.of(author_id))
          return answered(answer, request.headers["if-none-match"])
        }))
      .handle("create", ({ payload }) => Effect.map(authors.create(payload.name), (row) => written(row, 201)))
      .handle("update", ({ params, payload }) => Effect.map(authors.update(params.author_id, payload.name), (row) => written(row, 200)))
      .handle("remove", ({ params }) => Effect.asVoid(authors.remove(params.author_id)))
  })
)
