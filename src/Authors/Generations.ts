/**
 * The read cache's tags, the parts that are plain data (docs/architecture.md#its-invariants): the
 * scopes a read depends on, the list's three generations, and this process's epochs, moved by every
 * write it learns of. The shared side, in Redis, is SharedGenerations.ts; the cache itself,
 * ReadCache.ts.
 */
import type { GenerationKey } from "../Domain/RequestContext.ts"

/**
 * Id shards: scopes 0…65535; the whole list is scope 65536. Many shards, so that a write (a create
 * above all, whose new id was a cached 404) makes few unrelated id lookups miss; Redis holds at most
 * one small generation key per shard read or written (a few MB at most).
 */
export const ID_SHARDS = 65_536
export const LIST_SCOPE = ID_SHARDS
export type Scope = number

export const scopeOfId = (id: number): Scope => ((id % ID_SHARDS) + ID_SHARDS) % ID_SHARDS
/** A read filtered by id depends on that id's row only; any other read on the whole list. */
export const scopeOf = (filters: { readonly id?: number | undefined }): Scope =>
  filters.id === undefined ? LIST_SCOPE : scopeOfId(filters.id)
/** The list's generations record (Store/RedisLua.ts `clockRecordLua`), without REDIS_KEY_PREFIX. */
export const LIST_GENERATION_KEY = "authors:gen:all"
/** The scope's Redis generation key, without REDIS_KEY_PREFIX. */
export const generationKeyOf = (scope: Scope) => (scope === LIST_SCOPE ? LIST_GENERATION_KEY : `authors:gen:id:${scope}`)
export const LIST_GENERATION: GenerationKey = { key: LIST_GENERATION_KEY, record: true }

/** What a write did to its author: only a create can leave the list's rows as they were. */
export type WriteKind = "create" | "update" | "delete"

/**
 * The list's generations: `rows` changes with every write but an *append* (a create whose id is
 * not below `high`, the largest id appended so far: the same create seen twice, by its bump and by
 * its notification, is one append), `count` with every write. `BUMP_LUA` keeps them so in Redis,
 * this class in the process. A write of unknown id (`undefined`) is not an append.
 */
export class ListGenerations {
  private rows = 0
  private count = 0
  private high = 0
  written(id: number | undefined, kind: WriteKind) {
    if (kind === "create" && id !== undefined && id >= this.high) this.high = id
    else this.rows++
    this.count++
  }
  /** As Redis's record reads: `rows.count.high`. */
  get value() {
    return `${this.rows}.${this.count}.${this.high}`
  }
}

/** A list tag's parts: a page's rows and its total each depend on one of them (Authors.ts `readListPage`). */
export interface ListTags {
  /** The tag of a full page's rows: the `rows` generations. */
  readonly rows: string
  /** The tag of the total: the `count` generations. */
  readonly count: string
  /** The smallest of the `high` marks the tag carries (Redis's and this process's). */
  readonly high: number
}

/** The parts of a list tag (`rows.count.high`, shared and local joined by `:`); undefined when it is not one. */
export const listTagsOf = (tag: string): ListTags | undefined => {
  const records = tag.split(":").map((record) => record.split("."))
  if (!records.every((parts) => parts.length === 3 && Number.isSafeInteger(Number(parts[2])) && parts[2] !== "")) return undefined
  return {
    rows: records.map((parts) => parts[0]).join(":"),
    count: records.map((parts) => parts[1]).join(":"),
    high: Math.min(...records.map((parts) => Number(parts[2])))
  }
}

/** A notification's kinds (migrations/0007): `c:` inserted, `u:` updated, `d:` deleted; plain ids (0005's) are updates. */
const PAYLOAD_KINDS: Readonly<Record<string, WriteKind>> = { c: "create", u: "update", d: "delete" }

/** Creates remembered as seen once (`LocalEpochs.sighted`). */
const SIGHTED_MAX = 1024

/**
 * This process's side of the tags: an epoch per id shard and the list's generations, moved by
 * every write this process learns of (its own, and the change feed's), and whether tags can be
 * checked at all (the feed is up, or there is none). They only count up.
 *
 * A create of this process is seen twice: by its bump and by its notification, both after its
 * commit. The second sighting is not a second write (no reader could have stored an answer older
 * than the commit under the tag the first one made), so it moves nothing: else a batch's
 * notification, its ids below the `high` its bump set, would move `rows` and drop every page kept
 * apart. The creates seen once are remembered (the last SIGHTED_MAX); an update or a delete of
 * one, or anything that moves everything, forgets it, so a create that reuses an id (written by
 * hand) is never taken for the other sighting of an earlier one.
 */
export class LocalEpochs {
  private readonly shards = new Float64Array(ID_SHARDS)
  private readonly list = new ListGenerations()
  private readonly sightedOnce = new Set<number>()
  checkable: boolean
  constructor(checkable: boolean) {
    this.checkable = checkable
  }
  /** The scope's part of a tag. */
  tag(scope: Scope): string {
    return scope === LIST_SCOPE ? this.list.value : `${this.shards[scope]}`
  }
  /** A write of the authors `ids` (one statement's; undefined: unknown). */
  written(ids: ReadonlyArray<number> | undefined, kind: WriteKind) {
    if (ids === undefined) return this.list.written(undefined, kind)
    // Ascending: the creates of one statement committed together, all of them appends when above `high`.
    for (const id of ids.length > 1 ? [...ids].sort((a, b) => a - b) : ids) {
      if (!this.sighted(id, kind)) continue
      this.shards[scopeOfId(id)]!++
      this.list.written(id, kind)
    }
  }
  /** Anything may have changed. */
  all() {
    for (let scope = 0; scope < ID_SHARDS; scope++) this.shards[scope]!++
    this.list.written(undefined, "update")
    this.sightedOnce.clear()
  }
  /** A notification of committed writes (ChangeFeed.ts): `c:1,2`, `u:3`, `d:4`, plain ids; anything else means everything. */
  changed(payload: string) {
    const kind = payload[1] === ":" ? PAYLOAD_KINDS[payload[0]!] : "update"
    const ids = (payload[1] === ":" ? payload.slice(2) : payload).split(",")
    if (kind === undefined || !ids.every((id) => /^\d{1,19}$/.test(id))) return this.all()
    this.written(ids.map(Number), kind)
  }
  /** Whether this sighting of a write of `id` is news: not the second sighting of a create. */
  private sighted(id: number, kind: WriteKind): boolean {
    if (kind !== "create") {
      this.sightedOnce.delete(id)
      return true
    }
    if (this.sightedOnce.delete(id)) return false
    if (this.sightedOnce.size >= SIGHTED_MAX) this.sightedOnce.delete(this.sightedOnce.values().next().value!)
    this.sightedOnce.add(id)
    return true
  }
}
