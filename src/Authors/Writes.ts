/**
 * The authors' writes (docs/architecture.md#writes-in-batches): creates, renames and deletes,
 * written in batches — concurrent requests share one statement, one commit and one notification —
 * and each answered exactly as if it ran alone. Two resolvers (WriteBatches.ts), built once with
 * the service: one for creates, one for renames and deletes. Every statement bumps the read cache
 * for all its ids on every exit (docs/architecture.md#the-read-cache, I3), before its answers and
 * before its broadcasts (`announce`), so a client that reads on hearing of a change reads the change.
 */
import { Cause, Context, Effect, Exit, Layer, Option, Request, Tracer } from "effect"
import type { NonEmptyArray } from "effect/Array"
import { StatementDeadlineMarginMs } from "../Db/Deadline.ts"
import { isRefusedStatement } from "../Db/Failures.ts"
import type { AuthorEvent, AuthorRow } from "../Domain/Author.ts"
import { AuthorNameTaken, AuthorNotFound } from "../Errors.ts"
import { type WriteOperation, writeSeries } from "../Observability/Metrics.ts"
import { withSpanIfTraced } from "../Observability/Spans.ts"
import type { WriteKind } from "./Generations.ts"
import type { ReadCacheShape } from "./ReadCache.ts"
import { AUTHOR_ID_MAX, type AuthorRepo, type Change, type ChangeResult } from "./Repo.ts"
import { writeBatches } from "./WriteBatches.ts"

/** Where author changes are announced: the connection registry broadcasts them (Ws/Registry.ts). */
export class AuthorEvents extends Context.Service<AuthorEvents, {
  readonly publish: (event: AuthorEvent) => Effect.Effect<void>
}>()("Authors/Events") {
  /** Announces nowhere (tests of the HTTP handlers alone). */
  static readonly layerNone = Layer.succeed(AuthorEvents, { publish: () => Effect.void })
}

/** One create, answered by the batch it is written in. */
interface CreateAuthor extends Request.Request<AuthorRow, AuthorNameTaken> {
  readonly name: string
}
const CreateAuthor = Request.of<CreateAuthor>()
/** One rename, answered by the batch it is written in (with deletes). */
interface RenameAuthor extends Request.Request<AuthorRow, AuthorNameTaken | AuthorNotFound>, Change {}
const RenameAuthor = Request.of<RenameAuthor>()
/** One delete (`name` undefined), answered by the batch it is written in (with renames). */
interface DeleteAuthor extends Request.Request<AuthorRow, AuthorNotFound>, Change {}
const DeleteAuthor = Request.of<DeleteAuthor>()
type ChangeAuthor = RenameAuthor | DeleteAuthor

/**
 * The most writes in one statement: the change feed names the ids of at most 100 rows per
 * statement (migrations/0007), and announces a larger one as `all`, which would drop every
 * instance's cached answers.
 */
export const BATCH_MAX = 100
/** And their names' bytes: UTF-8 is at most 3 bytes per UTF-16 unit. */
const BATCH_MAX_BYTES = 64 * 1024
/** How long a batch waits for the one in flight at most (the default statement deadline). */
const BATCH_WAIT_MAX_MS = 5_000
/**
 * How much longer than PostgreSQL's `statement_timeout` the service waits for a batch's statement:
 * a batch too slow (one of its rows or names waits on another transaction) is cancelled by the
 * server — refused, so certainly not committed — before the service gives up on it (an unknown outcome).
 */
const BATCH_DEADLINE_MARGIN_MS = 1_000

/**
 * The text PostgreSQL stores for a name (UTF-8: a lone surrogate becomes U+FFFD). Two names are
 * one for the unique constraint exactly when these are equal (byte equality of the stored text).
 */
const storedText = (name: string) => name.toWellFormed()

/** Whether a request failed with its own answer (409, 404): the statement changed nothing. */
const answeredFailure = (exit: Exit.Exit<unknown, unknown>) => Exit.isFailure(exit) && exit.cause.reasons.every((reason) => reason._tag === "Fail")

/** The spans of a batch's requests, linked from the batch's span (one trace per request). */
const linksOf = <R>(entries: ReadonlyArray<Request.Entry<R>>): Array<Tracer.SpanLink> => {
  const links: Array<Tracer.SpanLink> = []
  for (const entry of entries) {
    const span = Context.getOption(entry.context as Context.Context<never>, Tracer.ParentSpan)
    if (Option.isSome(span)) links.push({ span: span.value, attributes: {} })
  }
  return links
}

export interface Writes {
  readonly create: (name: string) => Effect.Effect<AuthorRow, AuthorNameTaken>
  readonly update: (id: number, name: string) => Effect.Effect<AuthorRow, AuthorNameTaken | AuthorNotFound>
  readonly remove: (id: number) => Effect.Effect<AuthorRow, AuthorNotFound>
}

export const makeWrites = (repo: AuthorRepo["Service"], events: AuthorEvents["Service"], cache: ReadCacheShape): Writes => {
  /**
   * The bump of one statement's writes, then their broadcasts: a broadcast reaches no one before
   * the bump (on a Redis Cluster the generations and the channel live on different nodes, so
   * sending them together would not order them). The answers wait for the bump only. A
   * statement's renames and deletes bump as one non-create kind: only a create can be an append.
   */
  const announce = (kind: WriteKind, changed: ReadonlyArray<AuthorEvent>) =>
    Effect.andThen(
      cache.written(changed.map((c) => c.author.id), kind, "committed"),
      Effect.forEach(changed, (event) => Effect.forkDetach(events.publish(event), { startImmediately: true }), { discard: true })
    )

  /**
   * A write alone and its bump, on every exit (I3), as one uninterruptible step: a request whose
   * client went away (or a shutdown) waits for its statement's outcome, bounded by the statement
   * deadline, instead of leaving it to commit unannounced. Answered: bumped and broadcast. A 409 or
   * 404 changed nothing. Any other exit (a database error such as the deadline, a defect) may have
   * committed: its scopes are bumped anyway (`id` undefined: a create, whose id is unknown). The
   * bump follows the statement's own commit: a write is one autocommit statement, never part of a
   * wider transaction. A batch of 1 (`author_write_batch_size`).
   */
  const alone = <E extends AuthorNameTaken | AuthorNotFound>(
    operation: WriteOperation,
    event: AuthorEvent["event"],
    kind: WriteKind,
    id: number | undefined,
    statement: Effect.Effect<AuthorRow, E>
  ): Effect.Effect<AuthorRow, E> =>
    Effect.uninterruptible(Effect.onExit(statement, (exit) => {
      writeSeries[operation].batchSize.observe(1)
      return Exit.isSuccess(exit)
        ? announce(kind, [{ event, author: exit.value }])
        : answeredFailure(exit)
        ? Effect.void
        : cache.written(id === undefined ? undefined : [id], kind, "unknown")
    }))
  const createAlone = (name: string) => alone("create", "author.created", "create", undefined, repo.create(name))
  const changeAlone = (change: Change) =>
    change.name === undefined
      ? alone("delete", "author.deleted", "delete", change.id, repo.remove(change.id))
      : alone("rename", "author.updated", "update", change.id, repo.update(change.id, change.name))

  /** A batch's statement: waited for a little longer than the server's timer, and traced with links to its requests. */
  const batchStatement = <A, E>(statement: Effect.Effect<A, E>, name: string, entries: ReadonlyArray<Request.Entry<unknown>>) =>
    withSpanIfTraced(
      Effect.provideService(statement, StatementDeadlineMarginMs, BATCH_DEADLINE_MARGIN_MS),
      name,
      () => ({ attributes: { "batch.size": entries.length }, links: linksOf(entries) })
    )

  /**
   * A batch of creates in one statement, each request answered exactly as if it ran alone, its
   * entries in the order received:
   * - the names go in that order, so the ids follow it; of two with the same stored text the first
   *   is written and the second is told the name exists, as it would be right after the first;
   * - a name not inserted exists already (or was committed meanwhile by the transaction the
   *   statement waited for): 409;
   * - one bump for the statement (all its ids), then one broadcast per author, then the answers;
   * - a failure of the statement is no request's: every request is written again alone, in order
   *   (`createdAlone`).
   * Uninterruptible, on its own fiber: a request whose client went away is still written and bumped.
   */
  const createBatch = (entries: NonEmptyArray<Request.Entry<CreateAuthor>>): Effect.Effect<void> => {
    if (entries.length === 1) return complete(entries[0], createAlone(entries[0].request.name))
    const firsts = new Map<string, Request.Entry<CreateAuthor>>()
    for (const entry of entries) {
      const text = storedText(entry.request.name)
      if (!firsts.has(text)) firsts.set(text, entry)
    }
    const statement = batchStatement(repo.createMany(Array.from(firsts.values(), (entry) => entry.request.name)), "Authors.createBatch", entries)
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
      if (exit.value.length === 0) return answer
      return Effect.andThen(announce("create", exit.value.map((author) => ({ event: "author.created", author }))), answer)
    }))
  }

  /**
   * `createBatch` after its statement failed: each request written alone, in the order received.
   * Refused by the server (Db/Failures.ts `isRefusedStatement`), the statement wrote nothing. Of
   * unknown outcome (no answer, the connection lost), its creates are bumped as unknown first, and
   * a request whose name then exists is told what a lone create of unknown outcome is (the
   * database error) — unless another request was created alone, which proves the statement wrote nothing.
   */
  const createdAlone = (entries: NonEmptyArray<Request.Entry<CreateAuthor>>, cause: Cause.Cause<unknown>): Effect.Effect<void> => {
    const refused = cause.reasons.every((reason) => reason._tag === "Fail" && isRefusedStatement(reason.error))
    const retried = Effect.forEach(entries, (entry) => Effect.exit(createAlone(entry.request.name)))
    return Effect.map(refused ? retried : Effect.andThen(cache.written(undefined, "create", "unknown"), retried), (exits) => {
      const proven = refused || exits.some(Exit.isSuccess)
      entries.forEach((entry, i) => {
        const exit = exits[i]!
        entry.completeUnsafe(proven || !answeredFailure(exit) ? exit : Exit.die(Cause.squash(cause)))
      })
    })
  }

  /**
   * A batch of renames and deletes, in the order received, as runs of distinct ids (a change of an
   * id already in the run starts the next run), each run one statement (Repo.ts `changeMany`):
   * - a delete: its row (the request's 204), or 404;
   * - a rename: its row, or 404; held back when another row held its new name as the statement
   *   started: 409, unless a change received before it in the run touched that row (it may have
   *   freed the name) — then it is written alone once the statement is done, in order, after the
   *   ones before it: no change after it in the run can touch that row, nor take the name;
   * - a statement refused by the server (two renames to one name, a name a concurrent transaction
   *   took) wrote nothing: its changes are written alone, in order;
   * - of unknown outcome: every change bumped as unknown and answered the database error, as a lone
   *   write is under that fault (a rename written again succeeds whether or not the statement
   *   wrote it, so nothing would prove what the statement did).
   * An id beyond 1…AUTHOR_ID_MAX names no author: 404 without a statement, as alone.
   */
  const changeBatch = (entries: NonEmptyArray<Request.Entry<ChangeAuthor>>): Effect.Effect<void> => {
    if (entries.length === 1) return complete(entries[0], changeAlone(entries[0].request))
    const runs: Array<Array<Request.Entry<ChangeAuthor>>> = [[]]
    let ids = new Set<number>()
    for (const entry of entries) {
      const { id } = entry.request
      if (id < 1 || id > AUTHOR_ID_MAX) {
        entry.completeUnsafe(Exit.fail(AuthorNotFound.of(id)))
        continue
      }
      if (ids.has(id)) {
        runs.push([])
        ids = new Set()
      }
      ids.add(id)
      runs[runs.length - 1]!.push(entry)
    }
    return Effect.uninterruptible(Effect.forEach(runs, (run) => (run.length === 0 ? Effect.void : changeRun(run)), { discard: true }))
  }

  const changeRun = (run: ReadonlyArray<Request.Entry<ChangeAuthor>>): Effect.Effect<void> => {
    if (run.length === 1) return complete(run[0]!, changeAlone(run[0]!.request))
    const statement = batchStatement(repo.changeMany(run.map((entry) => entry.request)), "Authors.changeBatch", run)
    return Effect.flatMap(Effect.exit(statement), (exit) => {
      if (Exit.isSuccess(exit)) return changed(run, exit.value)
      if (exit.cause.reasons.every((reason) => reason._tag === "Fail" && isRefusedStatement(reason.error))) {
        return Effect.forEach(run, (entry) => complete(entry, changeAlone(entry.request)), { discard: true })
      }
      return Effect.andThen(
        cache.written(run.map((entry) => entry.request.id), "update", "unknown"),
        Effect.sync(() => run.forEach((entry) => entry.completeUnsafe(Exit.die(Cause.squash(exit.cause)))))
      )
    })
  }

  /** A run's statement answered: bump and broadcast what it changed, answer each change, write alone those held back. */
  const changed = (run: ReadonlyArray<Request.Entry<ChangeAuthor>>, results: ReadonlyArray<ChangeResult>): Effect.Effect<void> => {
    const byIndex = new Map(results.map((result) => [result.i, result]))
    const touched = new Set<number>()
    const later: Array<Request.Entry<ChangeAuthor>> = []
    const answers: Array<() => void> = []
    const events: Array<AuthorEvent> = []
    const answered = { rename: 0, delete: 0 }
    run.forEach((entry, k) => {
      const { id, name } = entry.request
      const result = byIndex.get(k + 1)
      if (result?.holder !== undefined && touched.has(result.holder)) {
        later.push(entry)
      } else if (result?.row !== undefined) {
        events.push({ event: name === undefined ? "author.deleted" : "author.updated", author: result.row })
        answers.push(() => entry.completeUnsafe(Exit.succeed(result.row)))
      } else {
        const error = result?.holder !== undefined && name !== undefined ? AuthorNameTaken.of(name) : AuthorNotFound.of(id)
        answers.push(() => entry.completeUnsafe(Exit.fail(error)))
      }
      if (!later.includes(entry)) answered[name === undefined ? "delete" : "rename"]++
      touched.add(id)
    })
    // One observation per operation the statement answered (those written alone later are batches of 1).
    if (answered.rename > 0) writeSeries.rename.batchSize.observe(answered.rename)
    if (answered.delete > 0) writeSeries.delete.batchSize.observe(answered.delete)
    const answer = Effect.sync(() => answers.forEach((f) => f()))
    return Effect.andThen(
      events.length === 0 ? answer : Effect.andThen(announce("update", events), answer),
      Effect.forEach(later, (entry) => complete(entry, changeAlone(entry.request)), { discard: true })
    )
  }

  /** Answers `entry` with `write`'s outcome, whatever it is. */
  const complete = <R extends Request.Any>(entry: Request.Entry<R>, write: Effect.Effect<Request.Success<R>, Request.Error<R>>) =>
    Effect.map(Effect.exit(write), (exit) => entry.completeUnsafe(exit))

  const batches = <R extends Request.Any>(write: (entries: NonEmptyArray<Request.Entry<R>>) => Effect.Effect<void>, bytesOf: (request: R) => number) =>
    writeBatches<R>({ maxSize: BATCH_MAX, maxBytes: BATCH_MAX_BYTES, bytesOf, maxWaitMs: BATCH_WAIT_MAX_MS, write })
  const creates = batches<CreateAuthor>(createBatch, (request) => request.name.length * 3)
  const changes = batches<ChangeAuthor>(changeBatch, (request) => (request.name?.length ?? 0) * 3 + 8)

  /**
   * A request waits for its batch uninterruptibly: once asked for, a write is written and bumped.
   * Counted in `author_writes_waiting` until answered.
   */
  const request = <A, E>(operation: WriteOperation, self: Effect.Effect<A, E>): Effect.Effect<A, E> =>
    Effect.uninterruptible(Effect.suspend(() => {
      const gauge = writeSeries[operation].waiting
      gauge.inc()
      return Effect.ensuring(self, Effect.sync(() => gauge.dec()))
    }))

  return {
    create: (name) => request("create", Effect.request(CreateAuthor({ name }), creates)),
    update: (id, name) => request("rename", Effect.request(RenameAuthor({ id, name }), changes)),
    remove: (id) => request("delete", Effect.request(DeleteAuthor({ id, name: undefined }), changes))
  }
}
