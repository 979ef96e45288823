/**
 * The exact read cache of author reads (docs/architecture.md#the-read-cache): `GET /authors` (one batch),
 * `GET /authors/paginated` (offset and cursor), `GET /authors/{author_id}` and WebSocket packages
 * 1 and 2 are answered from memory when nothing they depend on changed since the answer was read.
 *
 * Rules it keeps:
 * - A read that starts after the response to a write was sent reflects the write, on every
 *   instance. Each read depends on one *scope*: the whole list (`list`: lists, pages, totals) or,
 *   for reads filtered by id, the id's shard (`id:<id mod 65536>`), so a create leaves unrelated id
 *   lookups alone (below 65,536 authors, a shard is one id). Every write (create, rename, delete)
 *   bumps `list` and its id's shard after its commit and before its response. An answer is stored
 *   with the *tag* its reader observed before its database read, and served only to a reader
 *   observing the same tag. A reader that observed a tag from after a write's bump started after
 *   the bump, so after the commit: its database read saw the write. Tags never repeat (below), so
 *   an answer from before a write never matches again.
 * - The list's generation is three values (`ListGenerations`): `rows`, moved by every write but an
 *   *append* (a create whose id is above `high`), `count`, moved by every write, and `high`, the
 *   largest id appended. A read of the list depends on all three (any write changes its answer: an
 *   unfiltered page carries the total). An unfiltered page's rows alone depend on `rows` only when
 *   the page is full and the row after it (the largest id its statement read) is not above the
 *   `high` its reader observed: a later append has an id above every `high` before it, so it lands
 *   after that row, and a create committed but not bumped yet when the page was read has an id
 *   above that `high`, so a page holding it is not kept this way. Such rows are kept apart, and so
 *   is the total (under `count`): a page after an append is made from its kept rows and the total,
 *   read alone when no reader has since (Authors.ts `readPage`).
 * - With Redis, the tag's shared part is the scope's generation: `<REDIS_KEY_PREFIX>authors:gen:id:<n>`
 *   for a shard, the hash `<REDIS_KEY_PREFIX>authors:gen:all` (read as `rows.count.high`) for the
 *   list. It is read in the reply of the rate-limit script the request (or WebSocket message) runs
 *   anyway: no extra round trip (RateLimit/RedisRateLimiter.ts). A write bumps both in one script.
 *   A missing counter starts at Redis's clock in µs (Store/Redis.ts `clockCounterLua`,
 *   `clockRecordLua`; a missing `high` at 0), so after a restart or a flush no value seen before
 *   comes back. When the generation could not be read (rate limiting off, Redis down with
 *   RATE_LIMIT_FAIL_MODE=open) the read is served from the database and not stored. When a bump
 *   fails, this instance drops its own scopes and tells the others through PostgreSQL
 *   (`NOTIFY authors_changed`), logged and counted: they drop theirs when it arrives
 *   (milliseconds), the one window where another instance may still answer from before the write.
 *   A Redis failover that loses acknowledged writes can likewise lose a bump.
 * - Without Redis (one instance), generations live in this process.
 * - Every tag also carries a per-scope epoch of this process, bumped by its own writes (a shard's;
 *   the list's own writes move its generations) and by writes made outside the service, which
 *   arrive by LISTEN (ChangeFeed.ts) within milliseconds and move the list's whole tag. While the
 *   LISTEN connection is down every read bypasses the cache; when it is back the cache is flushed.
 *   With the embedded database (PGlite, no DATABASE_URL) there is no feed: notifications do not
 *   cross pglite-socket's connections (they share one session), and the database lives inside this
 *   process, so the only writers are the service itself and a local client of its loopback socket;
 *   such a client's writes are not seen by the cache.
 * - Memory: answers are kept least-recently-used first out, counted by their text's bytes plus a
 *   fixed overhead (a page kept both whole and for its rows counts twice); `read_cache_bytes` never
 *   exceeds READ_CACHE_MAX_BYTES (0 switches the cache off). An answer larger than 1/16 of the
 *   bound, and a streamed list (more than one batch), is not stored. Concurrent misses of one key
 *   under one tag share one database read.
 * - Counts: each entry looked up is a hit (held, or loaded by a concurrent identical read) or a
 *   miss (its statement ran), so misses count database reads. A page made from its kept rows counts
 *   those rows (a hit) and its total (a hit, or a miss when the total was read), not itself.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import type * as PgConnection from "@effect/sql-pg/PgConnection"
import { Context, Deferred, Effect, Exit, Layer, Option } from "effect"
import { randomBytes } from "node:crypto"
import {
  readCacheBypassedTotal,
  readCacheBytes,
  readCacheEntries,
  readCacheEvictionsTotal,
  readCacheHitsTotal,
  readCacheInvalidationErrorsTotal,
  readCacheMissesTotal
} from "../Observability/Metrics.ts"
import { AppConfig } from "../Config.ts"
import type { GenerationKey, Observed } from "../Domain/RequestContext.ts"
import { clockCounterLua, clockRecordLua, isDisconnected, RedisClient, redisCommand, type RedisConnection } from "../Store/Redis.ts"
import { CHANGES_CHANNEL, type FeedSink, runChangeFeed } from "./ChangeFeed.ts"
import { ReadAnswer, textBytes } from "./ReadAnswers.ts"

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
/** The list's generations record (Store/Redis.ts `clockRecordLua`), without REDIS_KEY_PREFIX. */
export const LIST_GENERATION_KEY = "authors:gen:all"
/** The scope's Redis generation key, without REDIS_KEY_PREFIX. */
export const generationKeyOf = (scope: Scope) => (scope === LIST_SCOPE ? LIST_GENERATION_KEY : `authors:gen:id:${scope}`)
const LIST_GENERATION: GenerationKey = { key: LIST_GENERATION_KEY, record: true }

/** What a write did to its author: only a create can leave the list's rows as they were. */
export type WriteKind = "create" | "update" | "delete"

/**
 * The list's generations: `rows` changes with every write but an *append* (a create whose id is
 * above `high`, the largest id appended so far), `count` with every create and delete (and
 * update: simpler, and rare). BUMP_LUA keeps them so in Redis; this class in the process.
 */
export class ListGenerations {
  private rows = 0
  private count = 0
  private high = 0
  written(id: number, kind: WriteKind) {
    if (kind === "create" && id > this.high) this.high = id
    else this.rows++
    this.count++
  }
  /** As Redis's record reads: `rows.count.high`. */
  get value() {
    return `${this.rows}.${this.count}.${this.high}`
  }
}

/** A list tag's parts: a page's rows and its total each depend on one of them (Authors.ts `readPage`). */
export interface ListTags {
  /** The tag of a full page's rows: its `rows` generation and the list's epoch. */
  readonly rows: string
  /** The tag of the total: its `count` generation and the list's epoch. */
  readonly count: string
  /** The largest id appended when the tag was read. */
  readonly high: number
}

/** The parts of a list tag (`rows.count.high:epoch`); undefined when it is not one. */
export const listTagsOf = (tag: string): ListTags | undefined => {
  const colon = tag.lastIndexOf(":")
  const parts = tag.slice(0, colon).split(".")
  const high = Number(parts[2])
  if (colon === -1 || parts.length !== 3 || !Number.isSafeInteger(high)) return undefined
  const epoch = tag.slice(colon)
  return { rows: `${parts[0]}${epoch}`, count: `${parts[1]}${epoch}`, high }
}

/** Bytes counted per entry besides its text: the entry, its key and tag, the map's slot. */
export const ENTRY_OVERHEAD_BYTES = 256
/** Answers above this fraction of the bound are not stored. */
export const LARGEST_ANSWER_FRACTION = 16

interface Entry {
  readonly tag: string
  readonly answer: ReadAnswer
  readonly bytes: number
}

/** Answers by key, least recently used first, bounded in bytes. */
export class AnswerStore {
  readonly maxBytes: number
  private readonly entries = new Map<string, Entry>()
  private held = 0
  constructor(maxBytes: number) {
    this.maxBytes = maxBytes
  }
  get bytes() {
    return this.held
  }
  get size() {
    return this.entries.size
  }
  /** The answer stored under `key` with `tag`; one stored with another tag is dropped. */
  get(key: string, tag: string): ReadAnswer | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    this.entries.delete(key)
    if (entry.tag !== tag) {
      this.release(entry)
      return undefined
    }
    this.entries.set(key, entry) // most recently used last
    return entry.answer
  }
  /** Stores the answer unless it is too large; evicts the least recently used to make room. */
  put(key: string, tag: string, answer: ReadAnswer): boolean {
    const bytes = textBytes(answer.body) + key.length * 2 + ENTRY_OVERHEAD_BYTES
    if (bytes * LARGEST_ANSWER_FRACTION > this.maxBytes) return false
    const previous = this.entries.get(key)
    if (previous !== undefined) {
      this.entries.delete(key)
      this.release(previous)
    }
    while (this.held + bytes > this.maxBytes) {
      const oldest = this.entries.entries().next()
      if (oldest.done === true) break
      this.entries.delete(oldest.value[0])
      this.release(oldest.value[1])
      readCacheEvictionsTotal.inc()
    }
    this.entries.set(key, { tag, answer, bytes })
    this.held += bytes
    this.report()
    return true
  }
  clear() {
    this.entries.clear()
    this.held = 0
    this.report()
  }
  private release(entry: Entry) {
    this.held -= entry.bytes
    this.report()
  }
  private report() {
    readCacheBytes.set(this.held)
    readCacheEntries.set(this.entries.size)
  }
}

/**
 * This process's side of the tags: an epoch per scope, and whether tags can be checked at all (the
 * feed of outside writes is up). A write made here bumps its id's shard; the list's epoch moves
 * only with outside writes (or a bump that failed), its writes move its generations.
 */
export class LocalEpochs {
  private readonly epochs = new Float64Array(ID_SHARDS + 1)
  checkable: boolean
  constructor(checkable: boolean) {
    this.checkable = checkable
  }
  /** `shared` is the scope's generation: Redis's, or the list's `ListGenerations` (none for a shard without Redis). */
  tag(scope: Scope, shared: string | undefined): string {
    return shared === undefined ? `${this.epochs[scope]}` : `${shared}:${this.epochs[scope]}`
  }
  /** A write of author `id` made here: the id's shard. */
  written(id: number) {
    this.epochs[scopeOfId(id)]!++
  }
  all() {
    for (let scope = 0; scope < this.epochs.length; scope++) this.epochs[scope]!++
  }
  /** A notification of outside writes: ids separated by commas; anything else means everything. */
  changed(payload: string) {
    const ids = payload.split(",")
    if (ids.length === 0 || !ids.every((id) => /^\d{1,19}$/.test(id))) return this.all()
    this.epochs[LIST_SCOPE]!++
    for (const id of ids) this.epochs[scopeOfId(Number(id))]!++
  }
}

/**
 * KEYS[1] = the list's record, KEYS[2] = the id's shard; ARGV = the write's kind, the id. The list's
 * rule is `ListGenerations.written`'s.
 */
const BUMP_LUA = `${clockRecordLua("list", "KEYS[1]")}local id = tonumber(ARGV[2])
if ARGV[1] == 'create' and id > tonumber(list_r[3] or '0') then
  redis.call('HSET', KEYS[1], 'high', ARGV[2])
else
  redis.call('HINCRBY', KEYS[1], 'rows', 1)
end
redis.call('HINCRBY', KEYS[1], 'count', 1)
${clockCounterLua("shard", "KEYS[2]")}redis.call('INCR', KEYS[2])
return 1
`

export interface ReadCacheShape {
  /**
   * The generation a read of `scope` needs from its rate check; undefined when it needs none
   * (generations in process, or the cache off).
   */
  readonly generationKey: (scope: Scope) => GenerationKey | undefined
  /**
   * The tag of a read of `scope` starting now, from the generation its rate check observed (with
   * Redis); undefined when it cannot be checked: the read goes to the database and is not stored.
   */
  readonly tag: (scope: Scope, observed: Observed | undefined) => string | undefined
  /**
   * The answer stored under `key` with `tag`, else `load`'s, stored when it is a `ReadAnswer` that
   * fits (concurrent misses of one key and tag share one `load`).
   */
  readonly read: <A, E, R>(key: string, tag: string | undefined, load: Effect.Effect<ReadAnswer | A, E, R>) => Effect.Effect<ReadAnswer | A, E, R>
  /**
   * The answer stored under `key` with `tag` (counted as a hit), else undefined and nothing
   * counted: the caller goes on to `read`, which counts the miss and shares concurrent loads.
   */
  readonly peek: (key: string, tag: string) => ReadAnswer | undefined
  /** Stores an answer read under `tag` (a part of a page read with its rows: Authors.ts `readPage`). */
  readonly keep: (key: string, tag: string, answer: ReadAnswer) => void
  /** After the commit of a write of author `id`, before its response. Never fails. */
  readonly written: (id: number, kind: WriteKind) => Effect.Effect<void>
  /** Differs on every process start: weak ETags built from tags carry it. */
  readonly bootId: string
}

export interface ReadCacheOptions {
  /** READ_CACHE_MAX_BYTES; 0 switches the cache off (writes still bump the shared generations). */
  readonly maxBytes: number
  /** Generations shared by every instance. */
  readonly redis: { readonly client: RedisConnection; readonly prefix: string } | undefined
  /** The PostgreSQL server's connection settings (LISTEN); none for the embedded database. */
  readonly feed: PgConnection.Config | undefined
  /** Tells every instance (through PostgreSQL) that author `id` changed: a failed bump's fallback. */
  readonly notify: (channel: string, payload: string) => Effect.Effect<void, unknown>
}

export const makeReadCache = (options: ReadCacheOptions) =>
  Effect.gen(function*() {
    const enabled = options.maxBytes > 0
    const store = new AnswerStore(options.maxBytes)
    const epochs = new LocalEpochs(options.feed === undefined)
    const list = new ListGenerations()
    const redis = options.redis
    // EVAL, not EVALSHA: after a script flush EVALSHA would be retried as EVAL behind the
    // broadcast issued with it (Authors.ts `announce`), which must not overtake the bump.
    const bump = redis === undefined
      ? undefined
      : (id: number, kind: WriteKind) =>
        redis.client.eval(BUMP_LUA, 2, `${redis.prefix}${LIST_GENERATION_KEY}`, `${redis.prefix}${generationKeyOf(scopeOfId(id))}`, kind, id)
    const inflight = new Map<string, { readonly tag: string; readonly done: Deferred.Deferred<ReadAnswer | undefined> }>()

    if (options.feed !== undefined) {
      const sink: FeedSink = {
        up: () => {
          store.clear()
          epochs.all()
          epochs.checkable = true
        },
        down: () => {
          epochs.checkable = false
        },
        changed: (payload) => epochs.changed(payload)
      }
      yield* Effect.forkScoped(runChangeFeed(options.feed, sink))
    }

    const tag = (scope: Scope, observed: Observed | undefined): string | undefined => {
      if (!enabled || !epochs.checkable) return undefined
      if (redis === undefined) return epochs.tag(scope, scope === LIST_SCOPE ? list.value : undefined)
      return observed !== undefined && observed.key === generationKeyOf(scope) ? epochs.tag(scope, observed.value) : undefined
    }

    const read = <A, E, R>(key: string, tag: string | undefined, load: Effect.Effect<ReadAnswer | A, E, R>): Effect.Effect<ReadAnswer | A, E, R> =>
      Effect.suspend(() => lookup(key, tag, load))

    /** When run (not when built): a load registered in flight must be one that runs. */
    const lookup = <A, E, R>(key: string, tag: string | undefined, load: Effect.Effect<ReadAnswer | A, E, R>): Effect.Effect<ReadAnswer | A, E, R> => {
      if (tag === undefined) {
        if (enabled) readCacheBypassedTotal.inc()
        return load
      }
      const hit = store.get(key, tag)
      if (hit !== undefined) {
        readCacheHitsTotal.inc()
        return Effect.succeed(hit)
      }
      const pending = inflight.get(key)
      if (pending !== undefined && pending.tag === tag) {
        readCacheHitsTotal.inc()
        return Effect.flatMap(Deferred.await(pending.done), (answer) => (answer === undefined ? load : Effect.succeed(answer)))
      }
      readCacheMissesTotal.inc()
      const mine = { tag, done: Deferred.makeUnsafe<ReadAnswer | undefined>() }
      inflight.set(key, mine)
      return Effect.onExit(load, (exit) =>
        Effect.sync(() => {
          if (inflight.get(key) === mine) inflight.delete(key)
          const answer = Exit.isSuccess(exit) && exit.value instanceof ReadAnswer ? exit.value : undefined
          if (answer !== undefined) store.put(key, tag, answer)
          // Waiting readers of a load that failed or was not storable read for themselves.
          Deferred.doneUnsafe(mine.done, Effect.succeed(answer))
        }))
    }

    const bumpFailed = (id: number, cause: unknown) =>
      Effect.gen(function*() {
        readCacheInvalidationErrorsTotal.inc()
        epochs.changed(String(id))
        yield* Effect.logWarning("Read cache: generations not bumped in Redis; other instances are told through PostgreSQL", cause)
        yield* options.notify(CHANGES_CHANNEL, String(id)).pipe(
          Effect.catch((error) => Effect.logError("Read cache: other instances could not be told of a write", error))
        )
      })

    const written = (id: number, kind: WriteKind): Effect.Effect<void> =>
      Effect.suspend(() => {
        epochs.written(id)
        if (redis === undefined || bump === undefined) {
          list.written(id, kind)
          return Effect.void
        }
        if (isDisconnected(redis.client)) return bumpFailed(id, new Error(`Redis ${redis.client.status}`))
        return redisCommand("EVAL bump_generations", () => bump(id, kind)).pipe(
          Effect.asVoid,
          Effect.catch((error) => bumpFailed(id, error.cause))
        )
      })

    return ReadCache.of({
      generationKey: (scope) =>
        !enabled || redis === undefined ? undefined : scope === LIST_SCOPE ? LIST_GENERATION : { key: generationKeyOf(scope), record: false },
      tag,
      read,
      peek: (key, tag) => {
        const hit = store.get(key, tag)
        if (hit !== undefined) readCacheHitsTotal.inc()
        return hit
      },
      keep: (key, tag, answer) => {
        store.put(key, tag, answer)
      },
      written,
      bootId: randomBytes(6).toString("base64url")
    })
  })

const fromConfig = (redis: ReadCacheOptions["redis"]) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const pg = yield* PgClient.PgClient
    return yield* makeReadCache({
      maxBytes: config.readCacheMaxBytes,
      redis,
      // The pool's settings: the feed's connection is the pool's kind, its own.
      feed: Option.isSome(config.databaseUrl) ? pg.config : undefined,
      notify: pg.notify
    })
  })

export class ReadCache extends Context.Service<ReadCache, ReadCacheShape>()("Authors/ReadCache") {
  /** One instance: generations in this process. */
  static readonly layerMemory = Layer.effect(ReadCache, fromConfig(undefined))
  /** Generations in Redis, shared by every instance. */
  static readonly layerRedis = Layer.effect(ReadCache, Effect.flatMap(RedisClient, ({ client, prefix }) => fromConfig({ client, prefix })))
  /** A cache that stores nothing and bumps nothing (tests of the transports alone). */
  static readonly layerNone = Layer.succeed(ReadCache, ReadCache.of({
    generationKey: () => undefined,
    tag: () => undefined,
    read: (_key, _tag, load) => load,
    peek: () => undefined,
    keep: () => {},
    written: () => Effect.void,
    bootId: "none"
  }))
}
