/**
 * The WebSocket packages (docs/websocket.md#messages): each is one entry of the
 * package table — its data schema, roles and handler over the same `Authors` service as HTTP.
 * The table describes the packages (`Packages`, for the AsyncAPI document); `PackageHandlers.layer`
 * binds their handlers to `Authors` and the `ReadCache` once, when it is built.
 * Processing a package is: data schema (before the rate check, in the connection: an author read's
 * generation rides on it) → permission → handler, and every outcome becomes a status_code through
 * the one error table. Packages 1 and 2 are author reads: their data is decoded by the read model
 * (Authors/Reads.ts), with the authors' schemas, into the read's key and scope.
 */
import { Context, Effect, Layer, Result, Schema, type SchemaIssue, SchemaParser } from "effect"
import { hasRoles } from "../Auth/Rbac.ts"
import { ListPackageData, PagePackageData } from "../Authors/Api.ts"
import { Authors } from "../Authors/Authors.ts"
import { ReadAnswer } from "../Authors/ReadAnswers.ts"
import { ReadCache } from "../Authors/ReadCache.ts"
import { type AuthorRead, listMessageRead, pageMessageRead } from "../Authors/Reads.ts"
import { Author, AuthorPayload } from "../Domain/Author.ts"
import type { PageMeta } from "../Domain/Pagination.ts"
import type { GenerationKey, Observed } from "../Domain/RequestContext.ts"
import { reportDatabaseFailure } from "../Db/Failures.ts"
import { OperationRoles, type Role, type User } from "../Domain/User.ts"
import { type ClientError, errorStatus, WsStatus } from "../Errors.ts"
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
  /** A message's data, decoded once, before the rate check (Dispatch.ts). */
  readonly prepare: (data: unknown) => Prepared
}

/** A message ready to be processed once its rate check admitted it. */
export interface Prepared {
  /** The read-cache generation the rate check also reads: an author read's (packages 1 and 2). */
  readonly generation: GenerationKey | undefined
  /** Permission → handler, `observed` being what the rate check read; never fails (errors are replies). */
  readonly process: (user: User, observed: Observed | undefined) => Effect.Effect<PackageReply>
}

/** A message answered without its handler (an envelope or data that does not decode, an unknown package). */
export const preparedReply = (r: PackageReply): Prepared => ({ generation: undefined, process: () => Effect.succeed(r) })

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
  /** The data schema, as documented (AsyncAPI) and decoded by `decode`. */
  readonly request: Schema.Top
  readonly response: Schema.Top
  readonly decode: (data: unknown) => Result.Result<A, SchemaIssue.Issue>
  /** The author read the data names (packages 1 and 2). */
  readonly read: (data: A) => AuthorRead | undefined
  /** The `msg` of a schema failure, from the first failing field of `data` (docs/websocket.md#status-codes). */
  readonly invalidMessage: (field: string | undefined) => string
  /** `tag`: the read's in the read cache (ReadCache.ts `tag`), undefined when it is not cached. */
  readonly handle: (
    services: HandlerServices,
    data: A,
    tag: string | undefined
  ) => Effect.Effect<{ readonly data: unknown; readonly meta: PageMeta | null }, ClientError>
}

/** A package's description, and its `Package` once bound to the services. */
interface PackageDefinition {
  readonly description: PackageDescription
  readonly bind: (services: HandlerServices) => Package
}

const PERMISSION_DENIED = reply(WsStatus.PERMISSION_DENIED, { msg: "Permission denied" })
export const DATABASE_ERROR = reply(WsStatus.ERROR, { msg: "Database error occurred" })

const noRead = () => undefined
const decodeAuthorPayload = SchemaParser.decodeUnknownResult(AuthorPayload, { errors: "all" })

const definePackage = <A>(spec: PackageSpec<A>): PackageDefinition => {
  const description: PackageDescription = {
    pkgId: spec.pkgId,
    name: spec.name,
    roles: spec.roles,
    summary: spec.summary,
    request: spec.request,
    response: spec.response
  }
  const invalid = (issue: SchemaIssue.Issue) => {
    const errors = errorItems(issue, ["data"])
    const field = errors[0]?.loc[1]
    return reply(WsStatus.INVALID_DATA, { msg: spec.invalidMessage(typeof field === "string" ? field : undefined), errors })
  }
  return {
    description,
    bind: (services) => ({
      ...description,
      prepare: (data) => {
        const decoded = spec.decode(data)
        if (Result.isFailure(decoded)) return preparedReply(invalid(decoded.failure))
        const read = spec.read(decoded.success)
        return {
          generation: read === undefined ? undefined : services.cache.generationKey(read.scope),
          process: (user, observed) => {
            if (!hasRoles(user, spec.roles)) return Effect.succeed(PERMISSION_DENIED)
            const tag = read === undefined ? undefined : services.cache.tag(read.scope, observed)
            return spec.handle(services, decoded.success, tag).pipe(
              Effect.map(({ data, meta }): PackageReply => ({ status: WsStatus.OK, data, meta, httpStatus: 200 })),
              Effect.catch((error) => Effect.succeed(reply(errorStatus[error._tag].ws, { msg: error.detail }, errorStatus[error._tag].http))),
              // docs/operations.md#outages: a database that failed is an outage to report once, not a bug per message.
              Effect.catchDefect((defect) =>
                Effect.as(reportDatabaseFailure(defect, `WebSocket ${spec.name}`, Effect.logError(`${spec.name} failed`, defect)), DATABASE_ERROR)
              )
            )
          }
        }
      }
    })
  }
}

const PAGINATION_FIELDS = new Set(["page", "per_page", "cursor"])

/** The package table; adding a package is one entry here. */
const definitions: ReadonlyArray<PackageDefinition> = [
  definePackage({
    pkgId: 1,
    name: "GET_AUTHORS",
    roles: OperationRoles.listAuthors,
    summary: "List authors, ordered by id; filters id, name / search_term (case-insensitive substring). " +
      "The whole list, as one message that a long list fills in several WebSocket fragments.",
    request: ListPackageData,
    response: Schema.Array(Author),
    decode: listMessageRead,
    read: (read) => read,
    invalidMessage: (field) => (field === "filters" ? "Invalid filter parameters" : "Invalid request data"),
    // The whole list, unpaginated (docs/websocket.md#messages), read in keyset batches and sent batch by batch as
    // one message (Streaming.ts): memory does not grow with the table.
    handle: ({ authors }, read, tag) =>
      Effect.map(authors.readList(read.filters, tag), (result) => ({
        data: result instanceof ReadAnswer ? new AnswerData(result, false) : new StreamedList(result.first, true, result.rest),
        meta: null
      }))
  }),
  definePackage({
    pkgId: 2,
    name: "GET_PAGINATED_AUTHORS",
    roles: OperationRoles.listAuthors,
    summary: "One page of authors (offset, or keyset with cursor from meta.next_cursor); meta as HTTP pagination.",
    request: PagePackageData,
    response: Schema.Array(Author),
    decode: pageMessageRead,
    read: (read) => read,
    invalidMessage: (field) =>
      field !== undefined && PAGINATION_FIELDS.has(field)
        ? "Invalid pagination parameters"
        : field === "filters"
        ? "Invalid filter parameters"
        : "Invalid request data",
    handle: ({ authors }, read, tag) =>
      Effect.map(authors.readPage(read.filters, read.page, tag), (answer) => ({ data: new AnswerData(answer, true), meta: answer.meta }))
  }),
  definePackage({
    pkgId: 3,
    name: "CREATE_AUTHOR",
    roles: OperationRoles.createAuthor,
    summary: "Create an author (name trimmed, 1–255 characters, unique).",
    request: AuthorPayload,
    response: Author,
    decode: decodeAuthorPayload,
    read: noRead,
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
