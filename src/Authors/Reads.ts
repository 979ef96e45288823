/**
 * The author reads as one model (docs/architecture.md#the-read-cache): what a request for one
 * names — its key in the read cache (ReadAnswers.ts), the scope whose generation its tag depends on
 * (ReadCache.ts) and the roles it needs — from the values the endpoints' own schemas decode
 * (Api.ts: `ListParams`, `PageParams`, `AuthorIdParams`, the packages' data), so every default,
 * clamp and bound comes from one place. Every path that looks for a read asks here: the front
 * door's cached-read stage and the generation its rate check reads (Http.ts `cachedRead`), the
 * handlers (Http.ts), and WebSocket packages 1 and 2 with the generation their rate check reads
 * (Ws/Packages.ts).
 */
import { Option, Result, Schema, type SchemaIssue, SchemaParser } from "effect"
import { FindMyWay } from "effect/http"
import type { AuthorFilters } from "../Domain/Author.ts"
import type { PageQuery } from "../Domain/Pagination.ts"
import { OperationRoles, type Role } from "../Domain/User.ts"
import { AuthorIdParams, ListParams, ListPackageData, PackageFilters, PageParams, PagePackageData } from "./Api.ts"
import { authorKey, listKey, pageKey } from "./ReadAnswers.ts"
import { type Scope, scopeOf, scopeOfId } from "./ReadCache.ts"

interface Read {
  /** The answer's key in the read cache: every parameter that shapes it. */
  readonly key: string
  /** The scope whose generation the read's tag depends on. */
  readonly scope: Scope
  /** The roles the endpoint (or package) needs. */
  readonly roles: ReadonlyArray<Role>
}

/** `GET /authors` (one batch), package 1. */
export interface ListRead extends Read {
  readonly _tag: "List"
  readonly filters: AuthorFilters
}

/** `GET /authors/paginated`, package 2. */
export interface PageRead extends Read {
  readonly _tag: "Page"
  readonly filters: AuthorFilters
  readonly page: PageQuery
}

/** `GET /authors/{author_id}`. */
export interface AuthorByIdRead extends Read {
  readonly _tag: "Author"
  readonly id: number
}

export type AuthorRead = ListRead | PageRead | AuthorByIdRead

export const listRead = (filters: AuthorFilters): ListRead => ({
  _tag: "List",
  filters,
  key: listKey(filters),
  scope: scopeOf(filters),
  roles: OperationRoles.listAuthors
})

export const pageRead = (filters: AuthorFilters, page: PageQuery): PageRead => ({
  _tag: "Page",
  filters,
  page,
  key: pageKey(filters, page),
  scope: scopeOf(filters),
  roles: OperationRoles.listAuthors
})

export const authorRead = (id: number): AuthorByIdRead => ({
  _tag: "Author",
  id,
  key: authorKey(id),
  scope: scopeOfId(id),
  roles: OperationRoles.getAuthor
})

/** `GET /authors/paginated`'s query as `PageParams` decodes it. */
export const pageQueryRead = ({ cursor, page, per_page, ...filters }: typeof PageParams.Type): PageRead =>
  pageRead(filters, { page, perPage: per_page, cursor: Option.fromUndefinedOr(cursor) })

/** Package filters: `name` and its alias `search_term` are substrings (the HTTP `search`). */
const packageFilters = (filters: typeof PackageFilters.Type | null | undefined): AuthorFilters => ({
  id: filters?.id ?? undefined,
  search: filters?.name ?? filters?.search_term ?? undefined
})

// --- HTTP --------------------------------------------------------------------------------------

/** The templates of the read routes, as the front door names routes (Http/Validation.ts). */
const READ_TEMPLATES: ReadonlySet<string> = new Set(["/authors", "/authors/paginated", "/authors/{author_id}"])

type Parsed = (params: Readonly<Record<string, string | undefined>>, query: Readonly<Record<string, string | Array<string>>>) => AuthorRead | undefined

/** A decoder that, like HttpApi's, reads a repeated query parameter as an array (which these schemas refuse). */
const queryDecoder = <S extends Schema.Codec<unknown, unknown>>(schema: S) => Schema.decodeUnknownResult(Schema.toCodecArrayFromSingle(schema))

const decodeList = queryDecoder(ListParams)
const decodePage = queryDecoder(PageParams)
const decodeAuthorId = Schema.decodeUnknownResult(Schema.Struct(AuthorIdParams))

/**
 * The reader of HTTP requests, built once with the app's router settings (HttpRouter.RouterConfig):
 * its own router over the three read routes parses the path and the query as the app's router does
 * (the same FindMyWay: percent-decoding, repeated parameters), and the endpoints' schemas decode
 * them as HttpApi does. It gives the read a `GET` names, or undefined when the request is not one
 * (another route or method, a query that does not decode: the app answers those).
 */
export const makeHttpReads = (routerConfig: Partial<FindMyWay.RouterConfig>) => {
  const router = FindMyWay.make<Parsed>(routerConfig)
  router.on("GET", "/authors", (_, query) => Result.getOrUndefined(Result.map(decodeList(query), listRead)))
  router.on("GET", "/authors/paginated", (_, query) => Result.getOrUndefined(Result.map(decodePage(query), pageQueryRead)))
  router.on("GET", "/authors/:author_id", (params) => Result.getOrUndefined(Result.map(decodeAuthorId(params), (p) => authorRead(p.author_id))))
  /** `template`: the front door's route for the request, so that other routes cost no parsing. */
  return (method: string, template: string | undefined, url: string): AuthorRead | undefined => {
    if (method !== "GET" || template === undefined || !READ_TEMPLATES.has(template)) return undefined
    const found = router.find(method, url)
    return found === undefined ? undefined : found.handler(found.params, found.searchParams)
  }
}

// --- WebSocket ---------------------------------------------------------------------------------

const decodeListMessage = SchemaParser.decodeUnknownResult(ListPackageData, { errors: "all" })
const decodePageMessage = SchemaParser.decodeUnknownResult(PagePackageData, { errors: "all" })

/** Package 1's data, decoded with its schema: the read, or why it does not decode. */
export const listMessageRead = (data: unknown): Result.Result<ListRead, SchemaIssue.Issue> =>
  Result.map(decodeListMessage(data), (d) => listRead(packageFilters(d.filters)))

/** Package 2's data, decoded with its schema: the read, or why it does not decode. */
export const pageMessageRead = (data: unknown): Result.Result<PageRead, SchemaIssue.Issue> =>
  Result.map(decodePageMessage(data), (d) =>
    pageRead(packageFilters(d.filters), { page: d.page, perPage: d.per_page, cursor: Option.fromNullishOr(d.cursor) }))

/** The read a WebSocket message names: packages 1 and 2 (their data decoded), none for another package. */
export const messageRead = (pkgId: number, data: unknown): Result.Result<AuthorRead, SchemaIssue.Issue> | undefined =>
  pkgId === 1 ? listMessageRead(data) : pkgId === 2 ? pageMessageRead(data) : undefined
