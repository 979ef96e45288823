/**
 * The authors HTTP handlers. Reads are answered with the text the `Authors` service gives (built
 * once per database read, kept by the read cache). The generation the request's rate check
 * observed (`RequestContext.observed`, Http/FrontDoor.ts) makes the read cacheable across
 * instances (ReadCache.ts).
 */
import { Effect, Option, Stream } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { authorRowsJson } from "../Domain/Author.ts"
import { getRequestContext } from "../Edge/RequestContext.ts"
import { AuthorNotFound } from "../Errors.ts"
import { Authors, type ListBatches } from "./Authors.ts"
import { ReadAnswer } from "./ReadAnswers.ts"
import { ReadCache, scopeOf, scopeOfId } from "./ReadCache.ts"
import type { AuthorFilters } from "./Repo.ts"

const encoder = new TextEncoder()
const JSON_TYPE = "application/json"

const answered = (answer: ReadAnswer) => HttpServerResponse.text(answer.body, { contentType: JSON_TYPE })

/**
 * GET /authors (unpaginated, INTERFACE) longer than one batch: a JSON array written batch by batch
 * (chunked), byte for byte what encoding `Schema.Array(Author)` gives. The first batch was read
 * before the response exists, so a database failure there is the usual JSON error; a failure
 * later aborts the answer.
 */
const streamed = ({ first, rest }: ListBatches) =>
  HttpServerResponse.stream(
    Stream.concat(
      Stream.make(`[${authorRowsJson(first)}`),
      Stream.concat(Stream.map(rest, (rows) => `,${authorRowsJson(rows)}`), Stream.make("]"))
    ).pipe(Stream.map((text) => encoder.encode(text))),
    { contentType: JSON_TYPE }
  )

export const AuthorsHttpLive = HttpApiBuilder.group(
  Api,
  "authors",
  Effect.fn(function*(handlers) {
    const authors = yield* Authors
    const cache = yield* ReadCache
    const tagOf = (filters: AuthorFilters) => Effect.map(getRequestContext, (ctx) => cache.tag(scopeOf(filters), ctx?.observed))

    return handlers
      .handle("list", ({ query }) =>
        Effect.flatMap(tagOf(query), (tag) =>
          Effect.map(authors.readList(query, tag), (result) => (result instanceof ReadAnswer ? answered(result) : streamed(result)))))
      .handle("paginated", ({ query: { cursor, page, per_page, ...filters } }) =>
        Effect.flatMap(tagOf(filters), (tag) =>
          Effect.map(authors.readPage(filters, { page, perPage: per_page, cursor: Option.fromUndefinedOr(cursor) }, tag), answered)))
      .handle("get", ({ params: { author_id } }) =>
        Effect.gen(function*() {
          const ctx = yield* getRequestContext
          const answer = yield* authors.readAuthor(author_id, cache.tag(scopeOfId(author_id), ctx?.observed))
          if (!answer.found) return yield* Effect.fail(AuthorNotFound.of(author_id))
          return answered(answer)
        }))
      .handle("create", ({ payload }) => authors.create(payload.name))
      .handle("update", ({ params, payload }) => authors.update(params.author_id, payload.name))
      .handle("remove", ({ params }) => Effect.asVoid(authors.remove(params.author_id)))
  })
)
