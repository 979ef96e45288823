/**
 * The author reads as one model (docs/architecture.md#the-read-cache): what a request for one
 * names — its key in the read cache (ReadAnswers.ts), the scope whose generation its tag depends on
 * (ReadCache.ts) and the roles it needs — from the values the endpoints' own schemas decode
 * (Api.ts: `ListParams`, `PageParams`, `AuthorIdParams`, the packages' data), so every default,
 * clamp and bound comes from one place. Every path that looks for a read asks here: the front
 * door's early answers and the generation its rate check reads (Http.ts `early`), the
 * handlers (Http.ts), and WebSocket packages 1 and 2 with the generation their rate check reads
 * (Ws/Packages.ts).
 */
import { Option, Result, Schema, type SchemaIssue, SchemaParser } from "effect"
import { FindMyWay } from "effect/http"
import type { AuthorFilters } from "../Domain/Author.ts"
import { AUTHORS_MAX_PER_PAGE, type PageQuery } from "../Domain/Pagination.ts"
import { OperationRoles, type Role } from "../Domain/User.ts"
import { AuthorIdParams, ListParams, ListPackageData, PackageFilters, PageParams, PagePackageData } from "./Api.ts"
import { authorKey, listKey, pageKey } from "./ReadAnswers.ts"
import { type Scope, scopeOf, scopeOfId } from "./Generations.ts"

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

type Parsed = (params: Readonly<Record<string, string | undefined>>, query: Readonly<Record<string, string | Array<string>>>) => AuthorRead | undefined

/** A decoder that, like HttpApi's, reads a repeated query parameter as an array (which these schemas refuse). */
const queryDecoder = <S extends Schema.Codec<unknown, unknown>>(schema: S) => Schema.decodeUnknownResult(Schema.toCodecArrayFromSingle(schema))

const decodeList = queryDecoder(ListParams)
const decodePage = queryDecoder(PageParams)
const decodeAuthorId = Schema.decodeUnknownResult(Schema.Struct(AuthorIdParams))

/** A page's defaults, as `PageParams` decodes a query without them (never written here). */
const PAGE_DEFAULTS = Schema.decodeUnknownSync(PageParams)({})

/**
 * A number the canonical form admits: digits, no sign, no leading zero, at most 9 of them — so
 * below every bound of `page`, `per_page` and `id` (32-bit, safe): the schemas decode it to itself.
 */
const CANONICAL_NUMBER = /^[1-9]\d{0,8}$/
const AUTHOR_PATH = /^\/authors\/([1-9]\d{0,8})$/

/**
 * The author id of a URL `/authors/<id>` written canonically (no query), as `AuthorIdParams`
 * decodes it; undefined for any other form, which the app's router and schema read.
 */
export const canonicalAuthorId = (url: string): number | undefined => {
  const match = AUTHOR_PATH.exec(url)
  return match === null ? undefined : Number(match[1])
}

/** `a=1&b=2`, each name among `names` once, each value canonical; undefined for anything else. */
const canonicalParams = (query: string, names: ReadonlyArray<string>): Record<string, number> | undefined => {
  const params: Record<string, number> = {}
  if (query === "") return params
  for (const pair of query.split("&")) {
    const eq = pair.indexOf("=")
    const name = pair.slice(0, eq)
    const value = pair.slice(eq + 1)
    if (eq <= 0 || !names.includes(name) || Object.hasOwn(params, name) || !CANONICAL_NUMBER.test(value)) return undefined
    params[name] = Number(value)
  }
  return params
}

const LIST_NAMES = ["id"]
const PAGE_NAMES = ["id", "page", "per_page"]

/**
 * The fast path of the front door's reads: a request in the one form clients write by default —
 * the route's own path, and only numeric parameters written canonically (`?page=2&per_page=20`,
 * `?id=17`, `/authors/17`) — read without the router and the schemas, as they would read it: a
 * canonical number is itself, an absent `page` or `per_page` is `PAGE_DEFAULTS`, and a `per_page`
 * up to AUTHORS_MAX_PER_PAGE is not clamped (a larger one is left to the schema). Undefined for
 * anything else, which the schemas read. test/unit/reads.test.ts pins that both agree.
 */
const canonicalRead = (template: string, url: string): AuthorRead | undefined => {
  const start = url.indexOf("?")
  const pathname = start === -1 ? url : url.slice(0, start)
  const query = start === -1 ? "" : url.slice(start + 1)
  switch (template) {
    case "/authors": {
      const params = pathname === "/authors" ? canonicalParams(query, LIST_NAMES) : undefined
      return params === undefined ? undefined : listRead(params)
    }
    case "/authors/paginated": {
      const params = pathname === "/authors/paginated" ? canonicalParams(query, PAGE_NAMES) : undefined
      if (params === undefined) return undefined
      const { page = PAGE_DEFAULTS.page, per_page = PAGE_DEFAULTS.per_page, ...filters } = params
      return per_page > AUTHORS_MAX_PER_PAGE ? undefined : pageRead(filters, { page, perPage: per_page, cursor: Option.none() })
    }
    case "/authors/{author_id}": {
      const match = start === -1 ? AUTHOR_PATH.exec(pathname) : null
      return match === null ? undefined : authorRead(Number(match[1]))
    }
    default:
      return undefined
  }
}

/**
 * The two ways the front door reads a request: `canonical` (the fast path, for the usual forms;
 * undefined for the others) and `decoded` — its own router over the three read routes, with the
 * app's router settings (HttpRouter.RouterConfig), parses the path and the query as the app's
 * router does (the same FindMyWay: percent-decoding, repeated parameters), and the endpoints'
 * schemas decode them as HttpApi does; undefined when the request is not a read (another route, a
 * query that does not decode: the app answers those).
 */
export const httpReaders = (routerConfig: Partial<FindMyWay.RouterConfig>) => {
  const router = FindMyWay.make<Parsed>(routerConfig)
  router.on("GET", "/authors", (_, query) => Result.getOrUndefined(Result.map(decodeList(query), listRead)))
  router.on("GET", "/authors/paginated", (_, query) => Result.getOrUndefined(Result.map(decodePage(query), pageQueryRead)))
  router.on("GET", "/authors/:author_id", (params) => Result.getOrUndefined(Result.map(decodeAuthorId(params), (p) => authorRead(p.author_id))))
  const decoded = (url: string): AuthorRead | undefined => {
    const found = router.find("GET", url)
    return found === undefined ? undefined : found.handler(found.params, found.searchParams)
  }
  return { canonical: canonicalRead, decoded }
}

/** The read routes, as the front door names routes (Http/Validation.ts). */
const READ_TEMPLATES: ReadonlySet<string> = new Set(["/authors", "/authors/paginated", "/authors/{author_id}"])

/**
 * The reader of HTTP requests, built once with the app's router settings: the read a `GET` of
 * route `template` (the front door's; other routes cost no parsing) names, or undefined.
 */
export const makeHttpReads = (routerConfig: Partial<FindMyWay.RouterConfig>) => {
  const { canonical, decoded } = httpReaders(routerConfig)
  return (method: string, template: string | undefined, url: string): AuthorRead | undefined =>
    method !== "GET" || template === undefined || !READ_TEMPLATES.has(template) ? undefined : canonical(template, url) ?? decoded(url)
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
