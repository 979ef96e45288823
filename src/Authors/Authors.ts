/**
 * The authors service: the one implementation behind HTTP and the WebSocket packages. Every
 * change is announced on `AuthorEvents` (broadcast to WebSocket clients, CONTRACT §5).
 */
import { Context, Effect, Layer, type Option } from "effect"
import type { AuthorEvent, AuthorRow } from "../Domain/Author.ts"
import type { PageMeta } from "../Domain/Author.ts"
import { encodeCursor, pageCount } from "../Domain/Pagination.ts"
import { type AuthorFilters, AuthorRepo } from "./Repo.ts"

/** Where author changes are announced: the connection registry broadcasts them (Ws/Registry.ts). */
export class AuthorEvents extends Context.Service<AuthorEvents, {
  readonly publish: (event: AuthorEvent) => Effect.Effect<void>
}>()("Authors/Events") {}

export interface PageQuery {
  readonly page: number
  readonly perPage: number
  readonly cursor: Option.Option<number>
}

export interface AuthorPage {
  readonly items: ReadonlyArray<AuthorRow>
  readonly meta: PageMeta
}

const make = Effect.gen(function*() {
  const repo = yield* AuthorRepo
  const events = yield* AuthorEvents
  const announce = (event: AuthorEvent["event"]) => (author: AuthorRow) =>
    Effect.forkDetach(events.publish({ event, author }))

  const list = (filters: AuthorFilters) => repo.list(filters)

  const paginate = (filters: AuthorFilters, query: PageQuery) =>
    Effect.map(
      repo.page(filters, { page: query.page, perPage: query.perPage, afterId: query.cursor }),
      ({ hasMore, items, total }): AuthorPage => ({
        items,
        meta: {
          page: query.page,
          per_page: query.perPage,
          total,
          pages: pageCount(total, query.perPage),
          next_cursor: hasMore && items.length > 0 ? encodeCursor(items[items.length - 1]!.id) : null,
          has_more: hasMore
        }
      })
    )

  const create = (name: string) => repo.create(name).pipe(Effect.tap(announce("author.created")))
  const update = (id: number, name: string) => repo.update(id, name).pipe(Effect.tap(announce("author.updated")))
  const remove = (id: number) => repo.remove(id).pipe(Effect.tap(announce("author.deleted")))

  // No span of their own: the request's (or WebSocket message's) span names the operation and
  // each statement has its `sql.execute` span; a span costs a copy of the fiber's whole context.
  return { list, paginate, create, update, remove } as const
})

export class Authors extends Context.Service<Authors>()("Authors/Authors", { make }) {
  /** With its repository (needs `SqlClient` and `AuthorEvents`). */
  static readonly layer = Layer.effect(Authors, make).pipe(Layer.provide(AuthorRepo.layer))
}
