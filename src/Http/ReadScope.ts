/**
 * Which read-cache generation the rate check of an HTTP request reads (Authors/ReadCache.ts): an
 * author read depends on the list, or on one id's shard when it is filtered by id. The front door
 * knows the method, route and query before the rate check, so the generation rides in its reply.
 * This is a guess made from the raw URL: the handler decides from the decoded parameters, and uses
 * the observed value only when it was read for the scope it needs.
 */
import { LIST_SCOPE, type ReadCache, type Scope, scopeOfId } from "../Authors/ReadCache.ts"
import { intFromText } from "../Domain/Params.ts"
import type { GenerationKey } from "../Domain/RequestContext.ts"

const idOfQuery = (url: string): number | undefined => {
  const start = url.indexOf("?")
  if (start === -1) return undefined
  const query = url.slice(start + 1)
  if (!query.includes("id=")) return undefined
  const ids = new URLSearchParams(query).getAll("id")
  return ids.length === 1 ? intFromText(ids[0]!) : undefined
}

const idOfPath = (url: string): number | undefined => {
  const end = url.indexOf("?")
  const path = end === -1 ? url : url.slice(0, end)
  const trimmed = path.replace(/\/+$/, "")
  const segment = trimmed.slice(trimmed.lastIndexOf("/") + 1)
  try {
    return intFromText(decodeURIComponent(segment))
  } catch {
    return undefined
  }
}

const scopeOfRequest = (template: string, url: string): Scope | undefined => {
  switch (template) {
    case "/authors":
    case "/authors/paginated": {
      const id = idOfQuery(url)
      return id === undefined ? LIST_SCOPE : scopeOfId(id)
    }
    case "/authors/{author_id}": {
      const id = idOfPath(url)
      return id === undefined ? undefined : scopeOfId(id)
    }
    default:
      return undefined
  }
}

/** The generation an HTTP request's rate check should read, if any. */
export const makeReadKeys = (cache: ReadCache["Service"]) => {
  // Generations in this process (or the cache off): nothing rides on the rate check.
  if (cache.generationKey(LIST_SCOPE) === undefined) return (): GenerationKey | undefined => undefined
  return (method: string, template: string | undefined, url: string): GenerationKey | undefined => {
    if (method !== "GET" || template === undefined) return undefined
    const scope = scopeOfRequest(template, url)
    return scope === undefined ? undefined : cache.generationKey(scope)
  }
}
