/**
 * The WebSocket packages (INTERFACE §WebSocket endpoint, CONTRACT §5): each is one entry of
 * `makePackages` — its data schema, roles and handler over the same `Authors` service as HTTP.
 * Processing a package is: data schema → permission → handler (the rate check comes before,
 * in the connection), and every outcome becomes a status_code through the one error table.
 */
import { Effect, Either, Option, Schema } from "effect"
import { OperationRoles, hasRoles } from "../Auth/Rbac.ts"
import { Cursor } from "../Authors/Api.ts"
import { Authors } from "../Authors/Authors.ts"
import type { AuthorFilters } from "../Authors/Repo.ts"
import { Author, AuthorPayload, type PageMeta } from "../Domain/Author.ts"
import { AUTHORS_MAX_PER_PAGE, MAX_PAGE } from "../Domain/Pagination.ts"
import type { Role, User } from "../Domain/User.ts"
import { type ClientError, errorStatus, WsStatus } from "../Errors.ts"
import { atLeast, atMost, ParamText } from "../Http/Params.ts"
import { errorItems, httpEquivalent } from "./Protocol.ts"

export interface PackageReply {
  readonly status: WsStatus
  readonly data: unknown
  readonly meta: PageMeta | null
  /** The HTTP status of the same outcome, for the audit record. */
  readonly httpStatus: number
}

export const reply = (status: WsStatus, data: unknown, httpStatus: number = httpEquivalent[status]): PackageReply => ({
  status,
  data,
  meta: null,
  httpStatus
})

export interface Package {
  readonly pkgId: number
  readonly name: string
  readonly roles: ReadonlyArray<Role>
  readonly summary: string
  readonly request: Schema.Schema.Any
  readonly response: Schema.Schema.Any
  /** Schema → permission → handler; never fails (errors are replies). */
  readonly process: (data: unknown, user: User) => Effect.Effect<PackageReply, never, Authors>
}

interface PackageSpec<A, I> {
  readonly pkgId: number
  readonly name: string
  readonly roles: ReadonlyArray<Role>
  readonly summary: string
  readonly request: Schema.Schema<A, I>
  readonly response: Schema.Schema.Any
  /** The `msg` of a schema failure, from the first failing field of `data` (CONTRACT §9). */
  readonly invalidMessage: (field: string | undefined) => string
  readonly handle: (data: A) => Effect.Effect<{ readonly data: unknown; readonly meta: PageMeta | null }, ClientError, Authors>
}

const PERMISSION_DENIED = reply(WsStatus.PERMISSION_DENIED, { msg: "Permission denied" })
const DATABASE_ERROR = reply(WsStatus.ERROR, { msg: "Database error occurred" })

const definePackage = <A, I>(spec: PackageSpec<A, I>): Package => {
  const decode = Schema.decodeUnknownEither(spec.request, { errors: "all" })
  return {
    pkgId: spec.pkgId,
    name: spec.name,
    roles: spec.roles,
    summary: spec.summary,
    request: spec.request,
    response: spec.response,
    process: (data, user) => {
      const decoded = decode(data)
      if (Either.isLeft(decoded)) {
        const errors = errorItems(decoded.left, ["data"])
        const field = errors[0]?.loc[1]
        return Effect.succeed(
          reply(WsStatus.INVALID_DATA, { msg: spec.invalidMessage(typeof field === "string" ? field : undefined), errors })
        )
      }
      if (!hasRoles(user, spec.roles)) return Effect.succeed(PERMISSION_DENIED)
      return spec.handle(decoded.right).pipe(
        Effect.map(({ data, meta }): PackageReply => ({ status: WsStatus.OK, data, meta, httpStatus: 200 })),
        Effect.catchAll((error) =>
          Effect.succeed(reply(errorStatus[error._tag].ws, { msg: error.detail }, errorStatus[error._tag].http))
        ),
        Effect.catchAllDefect((defect) => Effect.as(Effect.logError(`${spec.name} failed`, defect), DATABASE_ERROR))
      )
    }
  }
}

/** Package filters: `name` and its alias `search_term` are case-insensitive substrings (CONTRACT §9). */
const Filters = Schema.Struct({
  id: Schema.optionalWith(Schema.Int, { nullable: true }),
  name: Schema.optionalWith(ParamText, { nullable: true }),
  search_term: Schema.optionalWith(ParamText, { nullable: true })
})
type Filters = typeof Filters.Type

const toFilters = (filters: Filters | undefined): AuthorFilters => ({
  id: filters?.id,
  search: filters?.name ?? filters?.search_term
})

const PerPage = Schema.Int.pipe(
  atLeast(1),
  Schema.transform(Schema.Int, { strict: true, decode: (n) => Math.min(n, AUTHORS_MAX_PER_PAGE), encode: (n) => n })
).annotations({ description: `Clamped to ${AUTHORS_MAX_PER_PAGE}` })

const GetAuthorsData = Schema.Struct({ filters: Schema.optionalWith(Filters, { nullable: true }) })

const GetPaginatedAuthorsData = Schema.Struct({
  page: Schema.Int.pipe(atLeast(1), atMost(MAX_PAGE)),
  per_page: PerPage,
  filters: Schema.optionalWith(Filters, { nullable: true }),
  cursor: Schema.optionalWith(Cursor, { nullable: true })
})

const PAGINATION_FIELDS = new Set(["page", "per_page", "cursor"])

/** The package table; adding a package is one entry here. */
export const Packages: ReadonlyMap<number, Package> = new Map([
    definePackage({
      pkgId: 1,
      name: "GET_AUTHORS",
      roles: OperationRoles.listAuthors,
      summary: "List authors, ordered by id; filters id, name / search_term (case-insensitive substring).",
      request: GetAuthorsData,
      response: Schema.Array(Author),
      invalidMessage: (field) => (field === "filters" ? "Invalid filter parameters" : "Invalid request data"),
      handle: (data) =>
        Effect.flatMap(Authors, (authors) => authors.list(toFilters(data.filters))).pipe(
          Effect.map((items) => ({ data: items, meta: null }))
        )
    }),
    definePackage({
      pkgId: 2,
      name: "GET_PAGINATED_AUTHORS",
      roles: OperationRoles.listAuthors,
      summary: "One page of authors (offset, or keyset with cursor from meta.next_cursor); meta as HTTP pagination.",
      request: GetPaginatedAuthorsData,
      response: Schema.Array(Author),
      invalidMessage: (field) =>
        field !== undefined && PAGINATION_FIELDS.has(field)
          ? "Invalid pagination parameters"
          : field === "filters"
          ? "Invalid filter parameters"
          : "Invalid request data",
      handle: (data) =>
        Effect.flatMap(Authors, (authors) =>
          authors.paginate(toFilters(data.filters), { page: data.page, perPage: data.per_page, cursor: Option.fromNullable(data.cursor) })).pipe(
            Effect.map((page) => ({ data: page.items, meta: page.meta }))
          )
    }),
    definePackage({
      pkgId: 3,
      name: "CREATE_AUTHOR",
      roles: OperationRoles.createAuthor,
      summary: "Create an author (name trimmed, 1–255 characters, unique).",
      request: AuthorPayload,
      response: Author,
      invalidMessage: () => "Invalid request data",
      handle: (data) =>
        Effect.flatMap(Authors, (authors) => authors.create(data.name)).pipe(Effect.map((author) => ({ data: author, meta: null })))
    })
].map((p) => [p.pkgId, p] as const))
