import { Effect, Option } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { Authors } from "./Authors.ts"

export const AuthorsHttpLive = HttpApiBuilder.group(
  Api,
  "authors",
  Effect.fn(function*(handlers) {
    const authors = yield* Authors
    return handlers
      .handle("list", ({ query }) => authors.list(query))
      .handle("paginated", ({ query: { cursor, page, per_page, ...filters } }) =>
        authors.paginate(filters, { page, perPage: per_page, cursor: Option.fromUndefinedOr(cursor) }))
      .handle("create", ({ payload }) => authors.create(payload.name))
      .handle("update", ({ params, payload }) => authors.update(params.author_id, payload.name))
      .handle("remove", ({ params }) => Effect.asVoid(authors.remove(params.author_id)))
  })
)
