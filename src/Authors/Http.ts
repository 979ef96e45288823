import { HttpApiBuilder } from "@effect/platform"
import { Effect, Option } from "effect"
import { Api } from "../Api.ts"
import { Authors } from "./Authors.ts"

export const AuthorsHttpLive = HttpApiBuilder.group(Api, "authors", (handlers) =>
  Effect.gen(function*() {
    const authors = yield* Authors
    return handlers
      .handle("list", ({ urlParams }) => authors.list(urlParams))
      .handle("paginated", ({ urlParams: { cursor, page, per_page, ...filters } }) =>
        authors.paginate(filters, { page, perPage: per_page, cursor: Option.fromNullable(cursor) })
      )
      .handle("create", ({ payload }) => authors.create(payload.name))
      .handle("update", ({ path, payload }) => authors.update(path.author_id, payload.name))
      .handle("remove", ({ path }) => Effect.asVoid(authors.remove(path.author_id)))
  }))
