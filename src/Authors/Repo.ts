/**
 * Authors SQL. Rows come back with `created_at` already formatted by PostgreSQL, and a page comes
 * back in one statement with its total (from the `author_stats` counter when unfiltered: a view
 * summing the counter's shard rows, migrations/0004, so concurrent creates do not queue on one row)
 * and, when full, the id of the row after it. The unfiltered total is also read alone (`total`):
 * a page whose rows the read cache kept needs only that (ReadCache.ts).
 * One module (about 330 lines): the authors' SQL, every statement beside the others it must agree with.
 */
import { Context, Effect, Layer, Option } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as SqlError from "effect/sql/SqlError"
import type * as Statement from "effect/sql/Statement"
import { type AuthorFilters, type AuthorRow, isFiltered } from "../Domain/Author.ts"
import type { PageRequest } from "../Domain/Pagination.ts"
import { AuthorNameTaken, AuthorNotFound } from "../Errors.ts"
import { CHANGES_CHANNEL } from "./ChangeFeed.ts"

export interface AuthorPageResult {
  readonly items: ReadonlyArray<AuthorRow>
  readonly total: number
  readonly hasMore: boolean
  /** With `hasMore`, the id of the row after the page (the largest the statement read). */
  readonly lastId?: number
}

/** The largest id an author can have (answers carry it as a 32-bit `int`). */
export const AUTHOR_ID_MAX = 2_147_483_647

/** Rows per statement when the unpaginated list is streamed (keyset batches by id). */
export const LIST_BATCH_SIZE = 1000

/** Held (transaction-level) by the instance checking the total: an arbitrary, fixed key. */
const TOTAL_REPAIR_LOCK_KEY = 727_172_002

/** SQLSTATE 23505, as the driver classifies it. */
const isUniqueViolation = (error: SqlError.SqlError) => error.reason._tag === "UniqueViolation"

/** `%`, `_` and `\` in user input are literals, not wildcards. */
export const likePattern = (term: string) => `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`

/** A page from the rows read (its rows and, when there is one, the next: `perPage + 1` at most). */
const pageResult = (rows: Array<AuthorRow>, total: number, perPage: number): AuthorPageResult => {
  if (rows.length <= perPage) return { items: rows, total, hasMore: false }
  const lastId = rows[perPage]!.id
  rows.length = perPage
  return { items: rows, total, hasMore: true, lastId }
}

/** The columns of an answer, as every statement returns them (of the table aliased `table`). */
const columnsOf = (table = "") =>
  `${table}id::int AS id, ${table}name, to_char(${table}created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS created_at`
const COLUMNS = columnsOf()

/**
 * The creates of a batch (docs/architecture.md#writes-in-batches): one text for any number of names,
 * so it is prepared once. The names are inserted in the order given (`ORDER BY i`), so their ids
 * follow it; a name taken already, by a committed row or by a transaction that then commits, is
 * skipped (ON CONFLICT waits for that transaction, as a lone INSERT's unique check does).
 */
const CREATE_MANY = `INSERT INTO authors (name) SELECT n FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i ` +
  `ON CONFLICT (name) DO NOTHING RETURNING ${COLUMNS}`

/**
 * The renames and deletes of a batch (docs/architecture.md#writes-in-batches), each of its own id,
 * in one statement: `$1` the ids, `$2` the new names ('' for a delete), in the order received. A
 * rename whose row exists and whose new name another row holds as the statement starts is not
 * applied: its row comes back as `held` with that holder's id, for the caller to decide (whether a
 * change received before it freed the name). Every other rename and every delete is applied; one
 * that finds no row comes back with nothing. Two renames to one free name fail the statement
 * (unique violation), as does a name a concurrent transaction takes meanwhile.
 */
const CHANGE_MANY = `WITH v AS (SELECT * FROM unnest($1::int[], $2::text[]) WITH ORDINALITY AS v(id, name, i)), ` +
  `held AS (SELECT v.i, h.id AS holder FROM v JOIN authors h ON h.name = v.name AND h.id <> v.id ` +
  `WHERE v.name <> '' AND EXISTS (SELECT 1 FROM authors s WHERE s.id = v.id)), ` +
  `deleted AS (DELETE FROM authors a USING v WHERE v.name = '' AND a.id = v.id RETURNING v.i, ${columnsOf("a.")}), ` +
  `renamed AS (UPDATE authors a SET name = v.name FROM v WHERE v.name <> '' AND a.id = v.id AND v.i NOT IN (SELECT i FROM held) ` +
  `RETURNING v.i, ${columnsOf("a.")}) ` +
  `SELECT i::int AS i, id, name, created_at, NULL::int AS holder FROM deleted UNION ALL ` +
  `SELECT i::int, id, name, created_at, NULL FROM renamed UNION ALL SELECT i::int, NULL, NULL, NULL, holder::int FROM held`

/** Authors by id, for the id lookups that missed the read cache together (Authors.ts `lookup`). */
const FIND_MANY = `SELECT ${COLUMNS} FROM authors WHERE id = ANY($1::int[])`

/** A rename (with its new name) or a delete, of a batch's (`changeMany`). */
export interface Change {
  readonly id: number
  /** The new name; undefined: a delete. */
  readonly name: string | undefined
}
/** What `changeMany` did to the change at `i` (1-based, as given): its row, or the id of the row holding its new name. */
export type ChangeResult =
  | { readonly i: number; readonly row: AuthorRow; readonly holder?: undefined }
  | { readonly i: number; readonly row?: undefined; readonly holder: number }

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const columns = sql.literal(COLUMNS)

  const where = (filters: AuthorFilters, afterId: Option.Option<number> = Option.none()) => {
    const clauses: Array<Statement.Fragment> = []
    if (filters.id !== undefined) clauses.push(sql`id = ${filters.id}`)
    if (filters.name !== undefined) clauses.push(sql`name = ${filters.name}`)
    if (filters.search !== undefined) clauses.push(sql`name ILIKE ${likePattern(filters.search)}`)
    if (Option.isSome(afterId)) clauses.push(sql`id > ${afterId.value}`)
    return clauses.length === 0 ? sql`` : sql`WHERE ${sql.and(clauses)}`
  }

  /**
   * One keyset batch of the list: at most LIST_BATCH_SIZE rows with an id above `afterId`, by id.
   * `authors.id`, not `id`: a bare `id` would name the output column `id::int AS id`, which no
   * index serves (every page became a full scan and sort).
   */
  const listBatch = (filters: AuthorFilters, afterId: Option.Option<number>) =>
    sql<AuthorRow>`SELECT ${columns} FROM authors ${where(filters, afterId)} ORDER BY authors.id LIMIT ${LIST_BATCH_SIZE}`.pipe(
      Effect.orDie
    )

  /** The unfiltered list's total: a page joins it, and `total` reads it alone. */
  const unfilteredTotal = sql<{ total: number }>`SELECT total::int AS total FROM author_stats`

  const page = (filters: AuthorFilters, request: PageRequest) =>
    Effect.gen(function*() {
      const limit = request.perPage + 1
      // The page's rows are chosen on the bare columns (an index scan), and only they are
      // formatted: rows skipped by OFFSET would otherwise be formatted too.
      const chosen = Option.isSome(request.afterId)
        ? sql`SELECT id, name, created_at FROM authors ${where(filters, request.afterId)} ORDER BY authors.id LIMIT ${limit}`
        : sql`SELECT id, name, created_at FROM authors ${where(filters)} ORDER BY authors.id LIMIT ${limit} OFFSET ${
          (request.page - 1) * request.perPage
        }`
      const totalQuery = isFiltered(filters) ? sql`SELECT count(*)::int AS total FROM authors ${where(filters)}` : unfilteredTotal
      // One statement: the total's single row, joined with the page's rows (none past the end).
      const rows = yield* sql<{ total: number; id: number | null; name: string; created_at: string }>`SELECT t.total, p.* FROM (${totalQuery}) AS t LEFT JOIN LATERAL (SELECT ${columns} FROM (${chosen}) AS page) AS p ON true ORDER BY p.id`
      const items: Array<AuthorRow> = []
      for (const row of rows) if (row.id !== null) items.push({ id: row.id, name: row.name, created_at: row.created_at })
      return pageResult(items, rows[0]?.total ?? 0, request.perPage)
    }).pipe(Effect.orDie)

  /** The total of the unfiltered list (the `author_stats` counter), alone. */
  const total = unfilteredTotal.pipe(
    Effect.orDie,
    Effect.map((rows) => rows[0]?.total ?? 0)
  )

  /**
   * One author by id. Ids are 32-bit (`id::int` in every answer): one beyond that range names an
   * author that cannot exist, answered without a statement.
   */
  const findById = (id: number) =>
    id < 1 || id > AUTHOR_ID_MAX
      ? Effect.succeed(Option.none<AuthorRow>())
      : sql<AuthorRow>`SELECT ${columns} FROM authors WHERE id = ${id}`.pipe(
        Effect.orDie,
        Effect.map((rows) => Option.fromUndefinedOr(rows[0]))
      )

  /** The authors of `ids` (each in 1…AUTHOR_ID_MAX) that exist, in one statement. */
  const findManyById = (ids: ReadonlyArray<number>) => sql.unsafe<AuthorRow>(FIND_MANY, [ids]).pipe(Effect.orDie)

  const first = <A>(rows: ReadonlyArray<A>, orElse: () => AuthorNotFound) =>
    rows[0] !== undefined ? Effect.succeed(rows[0]) : Effect.fail(orElse())

  const create = (name: string) =>
    sql<AuthorRow>`INSERT INTO authors (name) VALUES (${name}) RETURNING ${columns}`.pipe(
      Effect.catchTag("SqlError", (e) => isUniqueViolation(e) ? Effect.fail(AuthorNameTaken.of(name)) : Effect.die(e)),
      Effect.flatMap((rows) => Effect.succeed(rows[0]!))
    )

  /**
   * Creates the `names` (distinct, in the order received) in one statement: the rows it inserted,
   * in that order. A failure is the caller's to classify (committed or not: Db/Failures.ts).
   */
  const createMany = (names: ReadonlyArray<string>): Effect.Effect<ReadonlyArray<AuthorRow>, SqlError.SqlError> =>
    sql.unsafe<AuthorRow>(CREATE_MANY, [names])

  /**
   * The `changes` (distinct ids in 1…AUTHOR_ID_MAX, in the order received) in one statement
   * (`CHANGE_MANY`): what it did to each, a change it found no row for absent.
   */
  const changeMany = (changes: ReadonlyArray<Change>): Effect.Effect<ReadonlyArray<ChangeResult>, SqlError.SqlError> =>
    Effect.map(
      sql.unsafe<{ i: number; id: number | null; name: string | null; created_at: string | null; holder: number | null }>(
        CHANGE_MANY,
        [changes.map((change) => change.id), changes.map((change) => change.name ?? "")]
      ),
      (rows) =>
        rows.map((r): ChangeResult =>
          r.holder !== null ? { i: r.i, holder: r.holder } : { i: r.i, row: { id: r.id!, name: r.name!, created_at: r.created_at! } }
        )
    )

  const update = (id: number, name: string) =>
    sql<AuthorRow>`UPDATE authors SET name = ${name} WHERE id = ${id} RETURNING ${columns}`.pipe(
      Effect.catchTag("SqlError", (e) => isUniqueViolation(e) ? Effect.fail(AuthorNameTaken.of(name)) : Effect.die(e)),
      Effect.flatMap((rows) => first(rows, () => AuthorNotFound.of(id)))
    )

  const remove = (id: number) =>
    sql<AuthorRow>`DELETE FROM authors WHERE id = ${id} RETURNING ${columns}`.pipe(
      Effect.orDie,
      Effect.flatMap((rows) => first(rows, () => AuthorNotFound.of(id)))
    )

  /**
   * Repairs the unfiltered total when it drifted from `count(*)` (rows written with triggers off:
   * docs/operations.md#stale-answers-after-writing-to-the-database-by-hand) and says what it found;
   * undefined when another instance is checking. The drift is read in one statement, one snapshot:
   * writes that commit meanwhile change the rows and the shards alike, so it stays exact; it is added
   * to one shard row (to its latest value) and every instance's cache is told (NOTIFY `all`). Under
   * a transaction-level advisory lock, so two instances never both apply it.
   */
  const repairTotal = sql.withTransaction(Effect.gen(function*() {
    const locked = yield* sql<{ locked: boolean }>`SELECT pg_try_advisory_xact_lock(${TOTAL_REPAIR_LOCK_KEY}) AS locked`
    if (locked[0]?.locked !== true) return undefined
    const rows = yield* sql<{ counted: number; kept: number }>`SELECT (SELECT count(*) FROM authors)::float8 AS counted, (SELECT coalesce(sum(n), 0) FROM author_count_shards)::float8 AS kept`
    const { counted, kept } = rows[0]!
    if (counted !== kept) {
      yield* sql`UPDATE author_count_shards SET n = n + ${counted - kept}::bigint WHERE shard = 0`
      yield* sql`SELECT pg_notify(${CHANGES_CHANNEL}, 'all')`
    }
    return { counted, kept } as const
  })).pipe(Effect.orDie)

  return { listBatch, page, total, findById, findManyById, create, createMany, changeMany, update, remove, repairTotal } as const
})

/** What the driver fails with on SQLSTATE 23505. */
const uniqueViolation = () =>
  new SqlError.SqlError({
    reason: new SqlError.UniqueViolation({
      cause: Object.assign(new Error("duplicate key value violates unique constraint"), { code: "23505", severityUnlocalized: "ERROR" }),
      message: "PgConnection: Query failed",
      operation: "query",
      constraint: "authors_name_key"
    })
  })

/** `created_at` as the SQL repository formats it: UTC, microseconds, no zone. */
const formatCreatedAt = (date: Date) => `${date.toISOString().slice(0, 23)}000`

/**
 * The same repository in this process's memory, for handler tests: the SQL repository's filters
 * (exact `id` and `name`, `search` a case-insensitive substring), its order (by id), its pages by
 * offset and by cursor with their total, its unique names and its not-found answers.
 */
const makeMemory = Effect.sync((): AuthorRepo["Service"] => {
  const rows = new Map<number, AuthorRow>()
  let lastId = 0
  const matching = (filters: AuthorFilters, afterId: Option.Option<number> = Option.none()) => {
    const search = filters.search?.toLowerCase()
    return [...rows.values()].filter((row) =>
      (filters.id === undefined || row.id === filters.id) &&
      (filters.name === undefined || row.name === filters.name) &&
      (search === undefined || row.name.toLowerCase().includes(search)) &&
      (Option.isNone(afterId) || row.id > afterId.value)
    )
  }
  const nameTaken = (name: string, except?: number) => [...rows.values()].some((row) => row.name === name && row.id !== except)
  const insert = (name: string) => {
    const row: AuthorRow = { id: ++lastId, name, created_at: formatCreatedAt(new Date()) }
    rows.set(row.id, row)
    return row
  }
  const found = (id: number) => {
    const row = rows.get(id)
    return row === undefined ? Effect.fail(AuthorNotFound.of(id)) : Effect.succeed(row)
  }
  return {
    listBatch: (filters, afterId) => Effect.sync(() => matching(filters, afterId).slice(0, LIST_BATCH_SIZE)),
    page: (filters, request) =>
      Effect.sync(() => {
        const all = matching(filters)
        const from = Option.isSome(request.afterId)
          ? matching(filters, request.afterId)
          : all.slice((request.page - 1) * request.perPage)
        return pageResult(from.slice(0, request.perPage + 1), all.length, request.perPage)
      }),
    total: Effect.sync(() => rows.size),
    findById: (id) => Effect.sync(() => Option.fromUndefinedOr(rows.get(id))),
    findManyById: (ids) => Effect.sync(() => ids.flatMap((id) => rows.get(id) ?? [])),
    create: (name) =>
      Effect.suspend(() => {
        if (nameTaken(name)) return Effect.fail(AuthorNameTaken.of(name))
        return Effect.succeed(insert(name))
      }),
    createMany: (names) => Effect.sync(() => names.flatMap((name) => (nameTaken(name) ? [] : [insert(name)]))),
    changeMany: (changes) =>
      Effect.suspend(() => {
        // As CHANGE_MANY: names held as the statement starts hold back their renames; the rest applied.
        const held = changes.flatMap((change, k) => {
          const holder = change.name === undefined || !rows.has(change.id)
            ? undefined
            : [...rows.values()].find((row) => row.name === change.name && row.id !== change.id)
          return holder === undefined ? [] : [{ i: k + 1, holder: holder.id }]
        })
        const results: Array<ChangeResult> = [...held]
        // One statement: refused, it wrote nothing (the rows as they were before it).
        const before = new Map(rows)
        for (const [k, change] of changes.entries()) {
          const row = rows.get(change.id)
          if (row === undefined || held.some((h) => h.i === k + 1)) continue
          if (change.name === undefined) {
            rows.delete(change.id)
            results.push({ i: k + 1, row })
          } else {
            if (nameTaken(change.name, change.id)) {
              rows.clear()
              for (const [id, kept] of before) rows.set(id, kept)
              return Effect.fail(uniqueViolation())
            }
            const renamed = { ...row, name: change.name }
            rows.set(change.id, renamed)
            results.push({ i: k + 1, row: renamed })
          }
        }
        return Effect.succeed(results)
      }),
    update: (id, name) =>
      Effect.flatMap(Effect.suspend(() => found(id)), (row) => {
        if (nameTaken(name, id)) return Effect.fail(AuthorNameTaken.of(name))
        const updated: AuthorRow = { ...row, name }
        rows.set(id, updated)
        return Effect.succeed(updated)
      }),
    remove: (id) => Effect.tap(Effect.suspend(() => found(id)), () => Effect.sync(() => rows.delete(id))),
    // Its total is the map's size: it cannot drift.
    repairTotal: Effect.sync(() => ({ counted: rows.size, kept: rows.size }))
  }
})

export class AuthorRepo extends Context.Service<AuthorRepo>()("Authors/Repo", { make }) {
  /** PostgreSQL (needs `SqlClient`). */
  static readonly layer = Layer.effect(AuthorRepo, make)
  /** In memory, empty: for tests of what is built on it (test/unit/authors.handlers.test.ts). */
  static readonly layerMemory = Layer.effect(AuthorRepo, makeMemory)
}
