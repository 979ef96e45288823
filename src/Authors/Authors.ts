/**
 * The authors service: the one implementation behind HTTP and the WebSocket packages. Its writes
 * (Writes.ts) are written in batches, each answered as if it ran alone, and announced on
 * `AuthorEvents` (broadcast to WebSocket clients, docs/websocket.md#broadcasts). Reads come as the
 * text they are sent as, through the read cache (ReadCache.ts), which every write bumps on every
 * exit, after its commit and before its response and its broadcast. An unfiltered page whose
 * answer a create outdated (its total changed) is made again from its rows kept apart and the
 * total alone (`readListPage`).
 */
import { Context, Effect, Exit, Layer, Option, Request, RequestResolver, Stream } from "effect"
import { type AuthorFilters, type AuthorPage, type AuthorRow, isFiltered } from "../Domain/Author.ts"
import { authorTotalRepairsTotal } from "../Observability/Metrics.ts"
import { encodeCursor, pageCount, type PageQuery } from "../Domain/Pagination.ts"
import {
  authorAnswer,
  authorKey,
  listAnswer,
  listKey,
  pageAnswer,
  pageKey,
  pageRowsKey,
  type ReadAnswer,
  TOTAL_KEY,
  totalAnswer,
  withTotal
} from "./ReadAnswers.ts"
import { type ListTags, listTagsOf } from "./Generations.ts"
import { ReadCache } from "./ReadCache.ts"
import { AUTHOR_ID_MAX, type AuthorPageResult, AuthorRepo, LIST_BATCH_SIZE } from "./Repo.ts"
import { AuthorEvents, makeWrites } from "./Writes.ts"

export { AuthorEvents }

/** One author by id, found with the lookups that missed the read cache with it (`lookup`). */
interface FindAuthor extends Request.Request<AuthorRow | undefined> {
  readonly id: number
}
const FindAuthor = Request.of<FindAuthor>()
/** The most ids in one lookup statement. */
const LOOKUP_BATCH_MAX = 1000

/** How often the exact total is checked against `count(*)` (and once at start). */
const TOTAL_CHECK_EVERY = "10 minutes"

/** The unpaginated list when it is longer than one batch: streamed, never held (nor cached). */
export interface ListBatches {
  readonly first: ReadonlyArray<AuthorRow>
  readonly rest: Stream.Stream<ReadonlyArray<AuthorRow>>
}

const make = Effect.gen(function*() {
  const repo = yield* AuthorRepo
  const events = yield* AuthorEvents
  const cache = yield* ReadCache
  const { create, update, remove } = makeWrites(repo, events, cache)

  /**
   * Id lookups that missed the read cache in the same tick are one statement (`WHERE id =
   * ANY(…)`). It starts after every one of them observed its tag, so its answer is exact for each
   * (docs/architecture.md#the-read-cache). An id beyond the 32-bit range names an author that cannot
   * exist: answered without a statement.
   */
  const byId = RequestResolver.make<FindAuthor>((entries) =>
    Effect.map(repo.findManyById([...new Set(entries.map((entry) => entry.request.id))]), (rows) => {
      const found = new Map(rows.map((row) => [row.id, row]))
      for (const entry of entries) entry.completeUnsafe(Exit.succeed(found.get(entry.request.id)))
    })
  ).pipe(RequestResolver.batchN(LOOKUP_BATCH_MAX))
  const lookup = (id: number): Effect.Effect<AuthorRow | undefined> =>
    id < 1 || id > AUTHOR_ID_MAX ? Effect.succeed(undefined) : Effect.request(FindAuthor({ id }), byId)

  /** `load`'s result as an answer stamped with the time the read began: its age counts from there. */
  const answerOf = <A, B>(load: Effect.Effect<A>, answer: (a: A, readAt: number) => B): Effect.Effect<B> =>
    Effect.suspend(() => {
      const readAt = cache.now()
      return Effect.map(load, (a) => answer(a, readAt))
    })

  /**
   * The whole list, by id, in keyset batches of LIST_BATCH_SIZE rows, so memory does not grow
   * with the table. The first batch is read by the returned effect (a failure there is the
   * request's, answered as usual); the others as the stream is pulled. Each batch is its own
   * statement: rows changed while the list is being read may or may not appear (never twice).
   * `more`: a full first batch, so `rest` may have rows (none when the table ends exactly there);
   * without it the answer is `first` alone. `rest` yields no empty batch.
   */
  const listBatches = (filters: AuthorFilters) =>
    Effect.map(repo.listBatch(filters, Option.none()), (first) => {
      const lastId = (rows: ReadonlyArray<AuthorRow>) => rows[rows.length - 1]!.id
      const next = (rows: ReadonlyArray<AuthorRow>) =>
        rows.length < LIST_BATCH_SIZE ? Option.none<number>() : Option.some(lastId(rows))
      const rest = Option.match(next(first), {
        onNone: () => Stream.empty,
        onSome: (afterId) =>
          Stream.paginate(afterId, (after: number) =>
            Effect.map(repo.listBatch(filters, Option.some(after)), (rows) => [[rows], next(rows)] as const))
      })
      return { first, more: Option.isSome(next(first)), rest: Stream.filter(rest, (rows) => rows.length > 0) } as const
    })

  const pageOf = (query: PageQuery, { hasMore, items, total }: AuthorPageResult): AuthorPage => ({
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
  const readRows = (filters: AuthorFilters, query: PageQuery) =>
    repo.page(filters, { page: query.page, perPage: query.perPage, afterId: query.cursor })
  const paginate = (filters: AuthorFilters, query: PageQuery) => Effect.map(readRows(filters, query), (result) => pageOf(query, result))

  // Reads as answers, through the cache; `tag` from `ReadCache.tag` (undefined: not cached). A
  // list filtered by id alone is that author, or none: an id lookup.
  const readList = (filters: AuthorFilters, tag: string | undefined): Effect.Effect<ReadAnswer | ListBatches> =>
    filters.id !== undefined && filters.name === undefined && filters.search === undefined
      ? cache.read(listKey(filters), tag, answerOf(lookup(filters.id), (row, readAt) => listAnswer(row === undefined ? [] : [row], readAt)))
      : cache.read(listKey(filters), tag, answerOf(listBatches(filters), ({ first, more, rest }, readAt) => (more ? { first, rest } : listAnswer(first, readAt))))
  const readPage = (filters: AuthorFilters, query: PageQuery, tag: string | undefined): Effect.Effect<ReadAnswer> => {
    const parts = tag === undefined || isFiltered(filters) ? undefined : listTagsOf(tag)
    return tag === undefined || parts === undefined
      ? cache.read(pageKey(filters, query), tag, answerOf(paginate(filters, query), pageAnswer))
      : Effect.suspend(() => readListPage(query, tag, parts))
  }

  /**
   * An unfiltered page under the list's tag (docs/architecture.md#the-read-cache): its answer; else
   * its rows kept apart under the `rows` generation, with the total (kept under `count`, else read
   * alone); else the page statement, whose total is kept, and whose rows are kept when the page is
   * full and the row after it is not above the `high` its reader observed — so no create that
   * leaves `rows` as it was (its id not below any `high` before it) can land among them.
   */
  const readListPage = (query: PageQuery, tag: string, parts: ListTags): Effect.Effect<ReadAnswer> => {
    const key = pageKey({}, query)
    const kept = cache.peek(key, tag)
    if (kept !== undefined) return Effect.succeed(kept)
    const rows = cache.peek(pageRowsKey(query), parts.rows)
    if (rows !== undefined) {
      return Effect.map(cache.read(TOTAL_KEY, parts.count, answerOf(repo.total, totalAnswer)), (total) => {
        const answer = withTotal(rows, total)
        cache.keep(key, tag, answer)
        return answer
      })
    }
    return cache.read(
      key,
      tag,
      answerOf(readRows({}, query), (result, readAt) => {
        const answer = pageAnswer(pageOf(query, result), readAt)
        cache.keep(TOTAL_KEY, parts.count, totalAnswer(result.total, readAt))
        if (result.lastId !== undefined && result.lastId <= parts.high) cache.keep(pageRowsKey(query), parts.rows, answer)
        return answer
      })
    )
  }
  const readAuthor = (id: number, tag: string | undefined): Effect.Effect<ReadAnswer> =>
    cache.read(authorKey(id), tag, answerOf(lookup(id), authorAnswer))

  /**
   * The exact total (migrations/0004's shard rows) is kept by triggers; rows written with them off
   * (`session_replication_role = replica`, `pg_restore --disable-triggers`) leave it wrong in the
   * database itself. Checked at start and every TOTAL_CHECK_EVERY: a drift is repaired (Repo.ts
   * `repairTotal`), counted, logged, and bumped like a write of unknown id.
   */
  const checkTotal = Effect.flatMap(repo.repairTotal, (found) =>
    found === undefined || found.counted === found.kept
      ? Effect.void
      : Effect.andThen(
        Effect.sync(() => authorTotalRepairsTotal.inc()),
        Effect.andThen(
          Effect.logWarning(
            `Author total repaired: the kept total said ${found.kept}, count(*) says ${found.counted} ` +
              `(drift ${found.counted - found.kept}); rows were written with triggers off`
          ),
          cache.written(undefined, "update", "committed")
        )
      ))
  yield* Effect.forkScoped(Effect.forever(Effect.andThen(
    Effect.catchCause(checkTotal, (cause) => Effect.logWarning("Author total not checked", cause)),
    Effect.sleep(TOTAL_CHECK_EVERY)
  )))

  // No span of their own: the request's (or WebSocket message's) span names the operation and
  // each statement has its `sql.execute` span; a span costs a copy of the fiber's whole context.
  return { listBatches, paginate, readList, readPage, readAuthor, create, update, remove } as const
})

export class Authors extends Context.Service<Authors>()("Authors/Authors", { make }) {
  /** Needs an `AuthorRepo` (SQL, or in memory), `AuthorEvents` and a `ReadCache`. */
  static readonly layer = Layer.effect(Authors, make)
}
