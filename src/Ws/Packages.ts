/**
 * The WebSocket packages (docs/websocket.md#messages): each is one entry of the
 * package table — its data schema, roles and handler over the same `Authors` service as HTTP.
 * The table describes the packages (`Packages`, for the AsyncAPI document); `PackageHandlers.layer`
 * binds their handlers to `Authors` and the `ReadCache` once, when it is built.
 * Processing a package is: data schema → permission → handler (the rate check comes before,
 * in the connection), and every outcome becomes a status_code through the one error table.
 */
import { Context, Effect, Layer, Option, Result, Schema } from "effect"
import { hasRoles } from "../Auth/Rbac.ts"
import { Authors } from "../Authors/Authors.ts"
import { ReadAnswer } from "../Authors/ReadAnswers.ts"
import { ReadCache, scopeOf } from "../Authors/ReadCache.ts"
import { Author, type AuthorFilters, AuthorPayload } from "../Domain/Author.ts"
import { AUTHORS_MAX_PER_PAGE, clampPerPage, Cursor, MAX_PAGE, type PageMeta } from "../Domain/Pagination.ts"
import type { Observed } from "../Domain/RequestContext.ts"
import { reportDatabaseFailure } from "../Db/Failures.ts"
import { OperationRoles, type Role, type User } from "../Domain/User.ts"
import { type ClientError, errorStatus, WsStatus } from "../Errors.ts"
import { atLeast, atMost, ParamText } from "../Domain/Params.ts"
import { errorItems, httpEquivalent } from "./Protocol.ts"
import { StreamedList } from "./Streaming.ts"

/** A `data` already JSON (with its `meta` when `paged`): a read answer, sent as it is kept. */
export class AnswerData {
  readonly answer: ReadAnswer
  readonly paged: boolean
  constructor(answer: ReadAnswer, paged: boolean) {
    this.answer = answer
    this.paged = paged
  }
}

export interface PackageReply {
  readonly status: WsStatus
  /** The answer's `data`; a `StreamedList` is sent in fragments (Streaming.ts), an `AnswerData` as its text. */
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
  readonly request: Schema.Top
  readonly response: Schema.Top
  /**
   * Schema → permission → handler; never fails (errors are replies). `observed`: the read cache's
   * generation the message's rate check read (Dispatch.ts).
   */
  readonly process: (data: unknown, user: User, observed: Observed | undefined) => Effect.Effect<PackageReply>
}

/** What a package describes of itself, without its handler. */
export type PackageDescription = Pick<Package, "pkgId" | "name" | "roles" | "summary" | "request" | "response">

/** The services a handler reads and writes through, bound when `PackageHandlers.layer` is built. */
interface HandlerServices {
  readonly authors: Authors["Service"]
  readonly cache: ReadCache["Service"]
}

interface PackageSpec<A> {
  readonly pkgId: number
  readonly name: string
  readonly roles: ReadonlyArray<Role>
  readonly summary: string
  readonly request: Schema.Codec<A, unknown>
  readonly response: Schema.Top
  /** The `msg` of a schema failure, from the first failing field of `data` (docs/websocket.md#status-codes). */
  readonly invalidMessage: (field: string | undefined) => string
  readonly handle: (
    services: HandlerServices,
    data: A,
    observed: Observed | undefined
  ) => Effect.Effect<{ readonly data: unknown; readonly meta: PageMeta | null }, ClientError>
}

/** A package's description, and its `Package` once bound to the services. */
interface PackageDefinition {
  readonly description: PackageDescription
  readonly bind: (services: HandlerServices) => Package
}

const PERMISSION_DENIED = reply(WsStatus.PERMISSION_DENIED, { msg: "Permission denied" })
export const DATABASE_ERROR = reply(WsStatus.ERROR, { msg: "Database error occurred" })

const definePackage = <A>(spec: PackageSpec<A>): PackageDefinition => {
  const decode = Schema.decodeUnknownResult(spec.request, { errors: "all" })
  const description: PackageDescription = {
    pkgId: spec.pkgId,
    name: spec.name,
    roles: spec.roles,
    summary: spec.summary,
    request: spec.request,
    response: spec.response
  }
  return { description, bind: (services) => ({
    ...description,
    process: (data, user, observed) => {
      const decoded = decode(data)
      if (Result.isFailure(decoded)) {
        const errors = errorItems(decoded.failure.issue, ["data"])
        const field = errors[0]?.loc[1]
        return Effect.succeed(
          reply(WsStatus.INVALID_DATA, { msg: spec.invalidMessage(typeof field === "string" ? field : undefined), errors })
        )
      }
      if (!hasRoles(user, spec.roles)) return Effect.succeed(PERMISSION_DENIED)
      return spec.handle(services, decoded.success, observed).pipe(
        Effect.map(({ data, meta }): PackageReply => ({ status: WsStatus.OK, data, meta, httpStatus: 200 })),
        Effect.catch((error) =>
          Effect.succeed(reply(errorStatus[error._tag].ws, { msg: error.detail }, errorStatus[error._tag].http))
        ),
        // docs/operations.md#outages: a database that failed is an outage to report once, not a bug per message.
        Effect.catchDefect((defect) =>
          Effect.as(reportDatabaseFailure(defect, `WebSocket ${spec.name}`, Effect.logError(`${spec.name} failed`, defect)), DATABASE_ERROR)
        )
      )
    }
  }) }
}

/** Package filters: `name` and its alias `search_term` are case-insensitive substrings (docs/websocket.md#messages). */
const Filters = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.Int)),
  name: Schema.optional(Schema.NullOr(ParamText)),
  search_term: Schema.optional(Schema.NullOr(ParamText))
})
type Filters = typeof Filters.Type

const toFilters = (filters: Filters | null | undefined): AuthorFilters => ({
  id: filters?.id ?? undefined,
  search: filters?.name ?? filters?.search_term ?? undefined
})

const PerPage = clampPerPage(Schema.Int.check(atLeast(1)).annotate({ description: `Clamped to ${AUTHORS_MAX_PER_PAGE}` }))

const GetAuthorsData = Schema.Struct({ filters: Schema.optional(Schema.NullOr(Filters)) })

const GetPaginatedAuthorsData = Schema.Struct({
  page: Schema.Int.check(atLeast(1), atMost(MAX_PAGE)),
  per_page: PerPage,
  filters: Schema.optional(Schema.NullOr(Filters)),
  cursor: Schema.optional(Schema.NullOr(Cursor))
})

const PAGINATION_FIELDS = new Set(["page", "per_page", "cursor"])

/** The package table; adding a package is one entry here. */
const definitions: ReadonlyArray<PackageDefinition> = [
    definePackage({
      pkgId: 1,
      name: "GET_AUTHORS",
      roles: OperationRoles.listAuthors,
      summary: "List authors, ordered by id; filters id, name / search_term (case-insensitive substring). " +
        "The whole list, as one message that a long list fills in several WebSocket fragments.",
      request: GetAuthorsData,
      response: Schema.Array(Author),
      invalidMessage: (field) => (field === "filters" ? "Invalid filter parameters" : "Invalid request data"),
      // The whole list, unpaginated (docs/websocket.md#messages), read in keyset batches and sent batch by batch as
      // one message (Streaming.ts): memory does not grow with the table.
      handle: ({ authors, cache }, data, observed) => {
        const filters = toFilters(data.filters)
        return Effect.map(authors.readList(filters, cache.tag(scopeOf(filters), observed)), (result) => ({
          data: result instanceof ReadAnswer ? new AnswerData(result, false) : new StreamedList(result.first, true, result.rest),
          meta: null
        }))
      }
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
      handle: ({ authors, cache }, data, observed) => {
        const filters = toFilters(data.filters)
        const query = { page: data.page, perPage: data.per_page, cursor: Option.fromNullishOr(data.cursor) }
        return Effect.map(
          authors.readPage(filters, query, cache.tag(scopeOf(filters), observed)),
          (answer) => ({ data: new AnswerData(answer, true), meta: answer.meta })
        )
      }
    }),
    definePackage({
      pkgId: 3,
      name: "CREATE_AUTHOR",
      roles: OperationRoles.createAuthor,
      summary: "Create an author (name trimmed, 1–255 characters, unique).",
      request: AuthorPayload,
      response: Author,
      invalidMessage: () => "Invalid request data",
      handle: ({ authors }, data) => Effect.map(authors.create(data.name), (author) => ({ data: author, meta: null }))
    })
]

/** The packages as they describe themselves (the AsyncAPI document, Http.ts). */
export const Packages: ReadonlyMap<number, PackageDescription> = new Map(definitions.map((d) => [d.description.pkgId, d.description]))

/** The packages with their handlers, bound to `Authors` and the `ReadCache` when the Layer is built. */
export class PackageHandlers extends Context.Service<PackageHandlers, ReadonlyMap<number, Package>>()("Ws/PackageHandlers") {
  static readonly layer = Layer.effect(PackageHandlers, Effect.gen(function*() {
    const services: HandlerServices = { authors: yield* Authors, cache: yield* ReadCache }
    return new Map(definitions.map((d) => [d.description.pkgId, d.bind(services)]))
  }))
}
