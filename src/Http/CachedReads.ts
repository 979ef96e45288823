/**
 * Front door stage: an author read whose answer the read cache holds is answered here, after the
 * body limit, authentication and the rate limit, without the router and HttpApi (docs/performance.md).
 * The answer is the handler's own (`answered`, Authors/Http.ts) for the same key and tag: the
 * stored text, its ETag, a 304 when `If-None-Match` names it. Everything around it — the
 * X-RateLimit-*, id and security headers, metrics, access log, audit record — is the front door's,
 * as for any request.
 *
 * Only what it can decide exactly is answered here; anything else goes on to the app, which
 * decides as always: a caller without the role (the app's 403), a query this stage does not read
 * canonically (other parameters, a repeated one, a number written `+5`, `05` or ` 5`, a name filter),
 * a miss, a missing author (the app's 404), and a conditional `GET /authors` (its weak ETags are the
 * handler's). Keys and scopes are the handler's (Authors/ReadAnswers.ts, ReadCache.ts), from the
 * same values its schemas would decode.
 */
import { Option } from "effect"
import type { HttpServerResponse } from "effect/http"
import { answered } from "../Authors/Http.ts"
import { authorKey, listKey, pageKey } from "../Authors/ReadAnswers.ts"
import { LIST_SCOPE, type ReadCache, type Scope, scopeOfId } from "../Authors/ReadCache.ts"
import { hasRoles } from "../Auth/Rbac.ts"
import { AUTHORS_MAX_PER_PAGE, decodeCursor, INT32_MAX, MAX_PAGE } from "../Domain/Pagination.ts"
import type { RequestContext } from "../Domain/RequestContext.ts"
import { OperationRoles, type Role } from "../Domain/User.ts"

/** A non-negative integer written the one way `String(n)` writes it, and safe. */
const CANONICAL = /^(?:0|[1-9]\d{0,15})$/
const canonicalInt = (text: string): number | undefined => {
  if (!CANONICAL.test(text)) return undefined
  const n = Number(text)
  return Number.isSafeInteger(n) ? n : undefined
}

/** The query's parameters when each is one of `allowed` and appears once; undefined otherwise. */
const paramsOf = (url: string, allowed: ReadonlySet<string>): Map<string, string> | undefined => {
  const start = url.indexOf("?")
  const params = new Map<string, string>()
  if (start === -1 || start === url.length - 1) return params
  for (const [name, value] of new URLSearchParams(url.slice(start + 1))) {
    if (!allowed.has(name) || params.has(name)) return undefined
    params.set(name, value)
  }
  return params
}

const LIST_PARAMS: ReadonlySet<string> = new Set(["id"])
const PAGE_PARAMS: ReadonlySet<string> = new Set(["id", "page", "per_page", "cursor"])
const AUTHOR_PATH = /^\/authors\/(\d{1,16})$/

interface Read {
  readonly key: string
  readonly scope: Scope
  /** `GET /authors`: a conditional request goes to the handler. */
  readonly list: boolean
  /** The roles the endpoint needs (its `RequiredRoles`). */
  readonly roles: ReadonlyArray<Role>
}

/** An optional `id` filter; `null` when present but not canonical. */
const idFilter = (params: Map<string, string>): { readonly id?: number } | null => {
  const text = params.get("id")
  if (text === undefined) return {}
  const id = canonicalInt(text)
  return id === undefined ? null : { id }
}

const scopeOfFilter = (filter: { readonly id?: number }) => (filter.id === undefined ? LIST_SCOPE : scopeOfId(filter.id))

/** The read a request names, as the handler would key it; undefined when it is not one read here. */
export const readOf = (template: string, pathname: string, url: string): Read | undefined => {
  switch (template) {
    case "/authors": {
      if (pathname !== "/authors") return undefined
      const params = paramsOf(url, LIST_PARAMS)
      const filter = params === undefined ? null : idFilter(params)
      return filter === null ? undefined : { key: listKey(filter), scope: scopeOfFilter(filter), list: true, roles: OperationRoles.listAuthors }
    }
    case "/authors/paginated": {
      if (pathname !== "/authors/paginated") return undefined
      const params = paramsOf(url, PAGE_PARAMS)
      if (params === undefined) return undefined
      const filter = idFilter(params)
      const pageText = params.get("page")
      const perPageText = params.get("per_page")
      const cursorText = params.get("cursor")
      const page = pageText === undefined ? 1 : canonicalInt(pageText)
      const perPage = perPageText === undefined ? 20 : canonicalInt(perPageText)
      const cursor = cursorText === undefined ? Option.none() : decodeCursor(cursorText)
      if (filter === null || page === undefined || page < 1 || page > MAX_PAGE || perPage === undefined || perPage < 1 || perPage > INT32_MAX) return undefined
      if (cursorText !== undefined && Option.isNone(cursor)) return undefined
      const key = pageKey(filter, { page, perPage: Math.min(perPage, AUTHORS_MAX_PER_PAGE), cursor })
      return { key, scope: scopeOfFilter(filter), list: false, roles: OperationRoles.listAuthors }
    }
    case "/authors/{author_id}": {
      const match = AUTHOR_PATH.exec(pathname)
      const id = match === null ? undefined : canonicalInt(match[1]!)
      return id === undefined ? undefined : { key: authorKey(id), scope: scopeOfId(id), list: false, roles: OperationRoles.getAuthor }
    }
    default:
      return undefined
  }
}

export const makeCachedReads = (cache: ReadCache["Service"]) =>
/** The stored answer to this request, when there is one to give here. */
(
  method: string,
  template: string | undefined,
  pathname: string,
  url: string,
  ifNoneMatch: string | undefined,
  ctx: RequestContext
): HttpServerResponse.HttpServerResponse | undefined => {
  if (method !== "GET" || template === undefined || ctx.user === undefined) return undefined
  const read = readOf(template, pathname, url)
  if (read === undefined || !hasRoles(ctx.user, read.roles) || (read.list && ifNoneMatch !== undefined)) return undefined
  const tag = cache.tag(read.scope, ctx.observed)
  if (tag === undefined) return undefined
  const answer = cache.peek(read.key, tag)
  return answer === undefined || !answer.found ? undefined : answered(answer, ifNoneMatch)
}
