/**
 * The authors service: the one implementation behind HTTP and the WebSocket packages. Every
 * change is announced on `AuthorEvents` (broadcast to WebSocket clients, docs/websocket.md#broadcasts). Reads come
 * as the text they are sent as, through the read cache (ReadCache.ts), which every write bumps
 * on every exit (`write`): after its commit and before its response — and before its broadcast,
 * so a client that reads on hearing of a change reads the change. Concurrent creates are written
 * in batches, each answered as if it ran alone (`createBatch`, docs/architecture.md#writes-in-batches).
 * An unfiltered page whose answer a create outdated (its total changed) is made again from its
 * rows kept apart and the total alone (`readListPage`).
 */
import { Cause, Context, Effect, Exit, Fiber, Layer, Option, Request, Stream, Tracer } from "effect"
import type { NonEmptyArray } from "effect/Array"
import { StatementDeadlineMarginMs } from "../Db/Deadline.ts"
import { isRefusedStatement } from "../Db/Failures.ts"
import { type AuthorEvent, type AuthorFilters, type AuthorPage, type AuthorRow, isFiltered } from "../Domain/Author.ts"
import { AuthorNameTaken, type AuthorNotFound } from "../Errors.ts"
import { authorTotalRepairsTotal, type WriteOperation, writeSeries } from "../Observability/Metrics.ts"
import { withSpanIfTraced } from "../Observability/Spans.ts"
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
import { type ListTags, listTagsOf, ReadCache, type WriteKind } from "./ReadCache.ts"
import { type AuthorPageResult, AuthorRepo, LIST_BATCH_SIZE } from "./Repo.ts"
import { writeBatches } from "./WriteBatches.ts"

/** Where author changes are announced: the connection registry broadcasts them (Ws/Registry.ts). */
export class AuthorEvents extends Context.Service<AuthorEvents, {
  readonly publish: (event: AuthorEvent) => Effect.Effect<void>
}>()("Authors/Events") {
  /** Announces nowhere (tests of the HTTP handlers alone). */
  static readonly layerNone = Layer.succeed(AuthorEvents, { publish: () => Effect.void })
}

/** One create, answered by the batch it is written in (`createBatch`). */
interface CreateAuthor extends Request.Request<AuthorRow, AuthorNameTaken> {
  readonly name: string
}
const CreateAuthor = Request.of<CreateAuthor>()

/**
 * The most creates in one statement: the change feed names the ids of at most 100 rows per
 * statement (migrations/0007), and announces a larger one as `all`, which would drop every
 * instance's cached answers.
 */
export const CREATE_BATCH_MAX = 100
/** And their bytes: a name's UTF-8 is at most 3 bytes per UTF-16 unit. */
const CREATE_BATCH_MAX_BYTES = 64 * 1024
/** How long a batch waits for the one in flight at most (the default statement deadline). */
const BATCH_WAIT_MAX_MS = 5_000
/**
 * How much longer than PostgreSQL's `statement_timeout` the service waits for a batch's statement:
 * a batch too slow (one of its names waits on another transaction) is cancelled by the server —
 * refused, so certainly not committed — before the service gives up on it (an unknown outcome).
 */
const BATCH_DEADLINE_MARGIN_MS = 1_000

/**
 * The text PostgreSQL stores for a name (UTF-8: a lone surrogate becomes U+FFFD). Two names are
 * one for the unique constraint exactly when these are equal (byte equality of the stored text).
 */
const storedText = (name: string) => name.toWellFormed()

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
  /**
   * The bump and the broadcasts of one statement's writes are issued in the same tick, the bump
   * first, so they leave in one write to Redis (one connection, auto-pipelined), which runs them in
   * that order: a broadcast still reaches no one before the bump. The responses wait for the bump only.
   */
  const announce = (event: AuthorEvent["event"], kind: WriteKind, authors: ReadonlyArray<AuthorRow>) =>
    Effect.flatMap(Effect.forkChild(cache.written(authors.map((author) => author.id), kind, "committed"), { startImmediately: true }), (bump) =>
      Effect.andThen(
        Effect.forEach(authors, (author) => Effect.forkDetach(events.publish({ event, author }), { startImmediately: true }), { discard: true }),
        Fiber.join(bump)
      ))

  /**
   * A write and its bump, on every exit (docs/architecture.md#the-read-cache, I3), as one
   * uninterruptible step: a request whose client went away (or a shutdown) waits for its
   * statement's outcome, bounded by the statement deadline, instead of leaving it to commit
   * unannounced. Answered: bumped and broadcast. A 409 or 404 changed nothing. Any other exit (a
   * database error such as the deadline, a defect) may have committed: its scopes are bumped
   * anyway (`id` undefined: a create, whose id is unknown). The bump follows the statement's own
   * commit: a write is one autocommit statement, never part of a wider transaction. A statement
   * for one request: a batch of 1 (`author_write_batch_size`).
   */
  const write = <E extends AuthorNameTaken | AuthorNotFound>(
    operation: WriteOperation,
    event: AuthorEvent["event"],
    kind: WriteKind,
    id: number | undefined,
    statement: Effect.Effect<AuthorRow, E>
  ): Effect.Effect<AuthorRow, E> =>
    Effect.uninterruptible(Effect.onExit(statement, (exit) => {
      writeSeries[operation].batchSize.observe(1)
      return Exit.isSuccess(exit)
        ? announce(event, kind, [exit.value])
        : exit.cause.reasons.every((reason) => reason._tag === "Fail")
        ? Effect.void
        : cache.written(id === undefined ? undefined : [id], kind, "unknown")
    }))

  const createAlone = (name: string) => write("create", "author.created", "create", undefined, repo.create(name))

  /**
   * A batch of creates in one statement, each request answered exactly as if it ran alone
   * (docs/architecture.md#writes-in-batches), its entries in the order received:
   * - the names go in that order, so the ids follow it; of two with the same stored text the first
   *   is written and the second is told the name exists, as it would be right after the first;
   * - a name not inserted exists already (or was committed meanwhile by the transaction the
   *   statement waited for): 409;
   * - one bump for the statement (all its ids), then one broadcast per author, then the answers;
   * - a failure of the statement is no request's: every request is written again alone, in order.
   *   When the statement may have committed (no answer, the connection lost: not refused by the
   *   server), its creates are bumped as unknown first, and a request whose name then exists is
   *   told what a lone create of unknown outcome is (the database error) — unless another request
   *   of the batch was created alone, which proves the statement wrote nothing.
   * Uninterruptible, on its own fiber: a request whose client went away is still written and bumped.
   */
  const createBatch = (entries: NonEmptyArray<Request.Entry<CreateAuthor>>): Effect.Effect<void> => {
    if (entries.length === 1) {
      const [entry] = entries
      return Effect.map(Effect.exit(createAlone(entry.request.name)), (exit) => entry.completeUnsafe(exit))
    }
    const firsts = new Map<string, Request.Entry<CreateAuthor>>()
    for (const entry of entries) {
      const text = storedText(entry.request.name)
      if (!firsts.has(text)) firsts.set(text, entry)
    }
    const statement = withSpanIfTraced(
      Effect.provideService(repo.createMany(Array.from(firsts.values(), (entry) => entry.request.name)), StatementDeadlineMarginMs, BATCH_DEADLINE_MARGIN_MS),
      "Authors.createBatch",
      () => ({ attributes: { "batch.size": entries.length }, links: linksOf(entries) })
    )
    return Effect.uninterruptible(Effect.flatMap(Effect.exit(statement), (exit) => {
      if (Exit.isFailure(exit)) return createdAlone(entries, exit.cause)
      writeSeries.create.batchSize.observe(entries.length)
      const rows = new Map(exit.value.map((row) => [row.name, row]))
      const answer = Effect.sync(() => {
        for (const entry of entries) {
          const text = storedText(entry.request.name)
          const row = rows.get(text)
          entry.completeUnsafe(row !== undefined && firsts.get(text) === entry ? Exit.succeed(row) : Exit.fail(AuthorNameTaken.of(entry.request.name)))
        }
      })
      return exit.value.length === 0 ? answer : Effect.andThen(announce("author.created", "create", exit.value), answer)
    }))
  }

  /** `createBatch` after its statement failed: each request written alone, in the order received. */
  const createdAlone = (entries: NonEmptyArray<Request.Entry<CreateAuthor>>, cause: Cause.Cause<unknown>): Effect.Effect<void> => {
    const refused = cause.reasons.every((reason) => reason._tag === "Fail" && isRefusedStatement(reason.error))
    const alone = Effect.forEach(entries, (entry) => Effect.exit(createAlone(entry.request.name)))
    return Effect.map(refused ? alone : Effect.andThen(cache.written(undefined, "create", "unknown"), alone), (exits) => {
      const proven = refused || exits.some(Exit.isSuccess)
      entries.forEach((entry, i) => {
        const exit = exits[i]!
        const taken = Exit.isFailure(exit) && exit.cause.reasons.every((reason) => reason._tag === "Fail")
        entry.completeUnsafe(proven || !taken ? exit : Exit.die(Cause.squash(cause)))
      })
    })
  }

  const createResolver = writeBatches<CreateAuthor>({
    maxSize: CREATE_BATCH_MAX,
    maxBytes: CREATE_BATCH_MAX_BYTES,
    bytesOf: (request) => request.name.length * 3,
    maxWaitMs: BATCH_WAIT_MAX_MS,
    write: createBatch
  })

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

  // Reads as answers, through the cache; `tag` from `ReadCache.tag` (undefined: not cached).
  const readList = (filters: AuthorFilters, tag: string | undefined): Effect.Effect<ReadAnswer | ListBatches> =>
    cache.read(listKey(filters), tag, answerOf(listBatches(filters), ({ first, more, rest }, readAt) => (more ? { first, rest } : listAnswer(first, readAt))))
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
    cache.read(authorKey(id), tag, answerOf(repo.findById(id), (row, readAt) => authorAnswer(Option.getOrUndefined(row), readAt)))

  /** A write not answered yet (`author_writes_waiting`). */
  const waiting = <A, E>(operation: WriteOperation, self: Effect.Effect<A, E>): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const gauge = writeSeries[operation].waiting
      gauge.inc()
      return Effect.ensuring(self, Effect.sync(() => gauge.dec()))
    })
  /** Waits for its batch (`createBatch`) uninterruptibly: once asked for, a create is written and bumped. */
  const create = (name: string): Effect.Effect<AuthorRow, AuthorNameTaken> =>
    Effect.uninterruptible(waiting("create", Effect.request(CreateAuthor({ name }), createResolver)))
  const update = (id: number, name: string) => waiting("rename", write("rename", "author.updated", "update", id, repo.update(id, name)))
  const remove = (id: number) => waiting("delete", write("delete", "author.deleted", "delete", id, repo.remove(id)))

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

/** The spans of a batch's requests, linked from the batch's span (one trace per request). */
const linksOf = <R>(entries: ReadonlyArray<Request.Entry<R>>): Array<Tracer.SpanLink> => {
  const links: Array<Tracer.SpanLink> = []
  for (const entry of entries) {
    const span = Context.getOption(entry.context as Context.Context<never>, Tracer.ParentSpan)
    if (Option.isSome(span)) links.push({ span: span.value, attributes: {} })
  }
  return links
}

export class Authors extends Context.Service<Authors>()("Authors/Authors", { make }) {
  /** Needs an `AuthorRepo` (SQL, or in memory), `AuthorEvents` and a `ReadCache`. */
  static readonly layer = Layer.effect(Authors, make)
}
