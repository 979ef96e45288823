/**
 * The authors service: the one implementation behind HTTP and the WebSocket packages. Every
 * change is announced on `AuthorEvents` (broadcast to WebSocket clients, CONTRACT §5).
 */
import { Context, Effect, Option } from "effect"
import type { AuthorEvent, AuthorRow } from "../Domain/Author.js"
import type { PageMeta } from "../Domain/Author.js"
import { encodeCursor, pageCount } from "../Domain/Pagination.js"
import { type AuthorFilters, AuthorRepo } from "./Repo.js"

/** Where author changes are announced: the connection registry broadcasts them (Ws/Registry.ts). */
export class AuthorEvents extends Context.Tag("Authors/Events")<AuthorEvents, {
  readonly publish: (event: AuthorEvent) => Effect.Effect<void>
}>() {}

/** Spans without a captured call site: a stack trace per call costs more than it tells here. */
const NO_STACK = { captureStackTrace: false } as const

export interface PageQuery {
  readonly page: number
  readonly perPage: number
  readonly cursor: Option.Option<number>
}

export interface AuthorPage {
  readonly items: ReadonlyArray<AuthorRow>
  readonly meta: PageMeta
}

export class Authors extends Effect.Service<Authors>()("Authors/Authors", {
  effect: Effect.gen(function*() {
    const repo = yield* AuthorRepo
    const events = yield* AuthorEvents
    const announce = (event: AuthorEvent["event"]) => (author: AuthorRow) =>
      Effect.forkDaemon(events.publish({ event, author }))

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

    return {
      list: Effect.fn("Authors.list", NO_STACK)(list),
      paginate: Effect.fn("Authors.paginate", NO_STACK)(paginate),
      create: Effect.fn("Authors.create", NO_STACK)(create),
      update: Effect.fn("Authors.update", NO_STACK)(update),
      remove: Effect.fn("Authors.remove", NO_STACK)(remove)
    } as const
  }),
  dependencies: [AuthorRepo.Default]
}) {}
