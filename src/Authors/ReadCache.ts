/**
 * The exact read cache of author reads (docs/architecture.md#its-invariants: I1…I8 are kept here).
 * `GET /authors` (one batch), `GET /authors/paginated`, `GET /authors/{author_id}` and WebSocket
 * packages 1 and 2 are answered from memory while nothing they depend on changed.
 *
 * - A read depends on one *scope*: the whole list, or for a read by id the id's shard (`id mod
 *   65536`). Its answer is stored with the *tag* its reader observed before reading the database,
 *   served only to a reader observing the same tag, and never when older than
 *   READ_CACHE_MAX_AGE_SECONDS (counted from when its database read began).
 * - A tag is the scope's shared generation (Redis: read in the reply of the rate check, bumped by
 *   every write before its response, `BUMP_LUA`) and this process's own (`LocalEpochs`: moved by
 *   this process's writes and, through the change feed, by every committed write of any session,
 *   ChangeFeed.ts; none with the embedded PGlite, whose one session every pglite-socket
 *   connection shares, so notifications do not reach a listener, and whose only writer is this
 *   process). Neither repeats: a Redis value is above every value issued before it
 *   (Store/RedisLua.ts `nextGenerationLua`), local ones only count up, and a Redis reconnection drops
 *   every answer and moves every local epoch.
 * - The list's generations are three numbers (`ListGenerations`), so that an append leaves the rows
 *   of full unfiltered pages kept (Authors.ts `readListPage`).
 * - With no tag (no generation read, the feed down, the cache off) a read goes to the database and
 *   is not stored. Memory: least recently used out first, never above READ_CACHE_MAX_BYTES.
 * One module (about 350 lines): the store and `makeReadCache` are the two halves of I1…I8, read together.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Context, Deferred, Effect, Exit, Layer, Option, Schedule } from "effect"
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
import { RedisClient } from "../Store/Redis.ts"
import { type FeedSink, runChangeFeed } from "./ChangeFeed.ts"
import { generationKeyOf, LIST_GENERATION, LIST_SCOPE, LocalEpochs, type Scope, type WriteKind } from "./Generations.ts"
import { ReadAnswer, textBytes } from "./ReadAnswers.ts"
import { redisGenerations, type SharedGenerations } from "./SharedGenerations.ts"

/** Bytes counted per entry besides its text: the entry, its key and tag, the map's slot. */
export const ENTRY_OVERHEAD_BYTES = 256
/** Answers above this fraction of the bound are not stored. */
export const LARGEST_ANSWER_FRACTION = 16

interface Entry {
  readonly tag: string
  readonly answer: ReadAnswer
  readonly bytes: number
}

/** Answers by key, least recently used first, bounded in bytes and (unless `maxAgeMs` is 0) in age. */
export class AnswerStore {
  readonly maxBytes: number
  readonly maxAgeMs: number
  private readonly entries = new Map<string, Entry>()
  private held = 0
  constructor(maxBytes: number, maxAgeMs = 0) {
    this.maxBytes = maxBytes
    this.maxAgeMs = maxAgeMs
  }
  get bytes() {
    return this.held
  }
  get size() {
    return this.entries.size
  }
  /**
   * The answer stored under `key` with `tag`, read at most `maxAgeMs` before `now`; one too old is
   * dropped. One under another tag stays: its reader may be older than the one that stored it, and
   * a newer reader's answer replaces it (`put`).
   */
  get(key: string, tag: string, now: number): ReadAnswer | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    if (this.maxAgeMs > 0 && now - entry.answer.readAt > this.maxAgeMs) {
      this.entries.delete(key)
      this.release(entry)
      return undefined
    }
    if (entry.tag !== tag) return undefined
    this.entries.delete(key)
    this.entries.set(key, entry) // most recently used last
    return entry.answer
  }
  /**
   * Stores the answer unless it is too large, or an answer under another tag whose database read
   * began later is stored (a slow load does not replace a newer answer); evicts the least recently
   * used to make room.
   */
  put(key: string, tag: string, answer: ReadAnswer): boolean {
    const bytes = textBytes(answer.body) + key.length * 2 + ENTRY_OVERHEAD_BYTES
    if (bytes * LARGEST_ANSWER_FRACTION > this.maxBytes) return false
    const previous = this.entries.get(key)
    if (previous !== undefined) {
      if (previous.tag !== tag && previous.answer.readAt > answer.readAt) return false
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


/** How a write ended: its commit is known (answered), or it may have committed (a database error, a defect, an interruption). */
export type WriteOutcome = "committed" | "unknown"

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
  /** Stores an answer read under `tag` (a part of a page read with its rows: Authors.ts `readListPage`). */
  readonly keep: (key: string, tag: string, answer: ReadAnswer) => void
  /**
   * After a write statement of the authors `ids` (undefined: creates whose ids are unknown) ended,
   * before its responses: bumps their scopes, here and in Redis, once for the statement. Never fails.
   */
  readonly written: (ids: ReadonlyArray<number> | undefined, kind: WriteKind, outcome: WriteOutcome) => Effect.Effect<void>
  /** The cache's clock (ms): an answer's `readAt`. */
  readonly now: () => number
  /** Differs on every process start: weak ETags built from tags carry it. */
  readonly bootId: string
}

export interface ReadCacheOptions {
  /** READ_CACHE_MAX_BYTES; 0 switches the cache off (writes still bump the shared generations). */
  readonly maxBytes: number
  /** READ_CACHE_MAX_AGE_SECONDS in ms; 0: no limit. */
  readonly maxAgeMs: number
  /** Generations shared by every instance (Redis). */
  readonly shared: SharedGenerations | undefined
  /** Runs the feed of committed writes into the sink (ChangeFeed.ts); none for the embedded database. */
  readonly feed: ((sink: FeedSink) => Effect.Effect<never>) | undefined
  /**
   * With no feed: returns once every statement sent before it has ended (PGlite runs one at a
   * time), so a statement given up on has committed or never will.
   */
  readonly settled: Effect.Effect<void, unknown>
}

export const makeReadCache = (options: ReadCacheOptions) =>
  Effect.gen(function*() {
    const enabled = options.maxBytes > 0
    const store = new AnswerStore(options.maxBytes, options.maxAgeMs)
    const epochs = new LocalEpochs(options.feed === undefined)
    const shared = options.shared
    const clock = yield* Effect.clockWith(Effect.succeed)
    const now = () => Number(clock.monotonicTimeNanosUnsafe() / 1_000_000n)
    const scope = yield* Effect.scope
    const inflight = new Map<string, { readonly tag: string; readonly done: Deferred.Deferred<ReadAnswer | undefined> }>()
    const reset = () => {
      store.clear()
      epochs.all()
    }

    if (options.feed !== undefined) {
      const sink: FeedSink = {
        up: () => {
          reset()
          epochs.checkable = true
        },
        down: () => {
          epochs.checkable = false
        },
        changed: (payload) => epochs.changed(payload)
      }
      yield* Effect.forkScoped(options.feed(sink))
    }
    if (shared !== undefined) yield* shared.onReset(reset)

    const tag = (scope: Scope, observed: Observed | undefined): string | undefined => {
      if (!enabled || !epochs.checkable) return undefined
      if (shared === undefined) return epochs.tag(scope)
      return observed !== undefined && observed.key === generationKeyOf(scope) ? `${observed.value}:${epochs.tag(scope)}` : undefined
    }

    const read = <A, E, R>(key: string, tag: string | undefined, load: Effect.Effect<ReadAnswer | A, E, R>): Effect.Effect<ReadAnswer | A, E, R> =>
      Effect.suspend(() => lookup(key, tag, load))

    /** When run (not when built): a load registered in flight must be one that runs. */
    const lookup = <A, E, R>(key: string, tag: string | undefined, load: Effect.Effect<ReadAnswer | A, E, R>): Effect.Effect<ReadAnswer | A, E, R> => {
      if (tag === undefined) {
        if (enabled) readCacheBypassedTotal.inc()
        return load
      }
      const hit = store.get(key, tag, now())
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

    /**
     * No feed (PGlite): a statement given up on may still commit behind the statements queued before
     * it. Once a statement sent later has run (retried until it has), it has committed or never
     * will: everything moves again. One round at a time; an outcome unknown during a round asks
     * for another.
     */
    let settling = false
    let unsettled = false
    const settleRound: Effect.Effect<void> = Effect.suspend(() => {
      unsettled = false
      return options.settled.pipe(
        Effect.retry(Schedule.spaced("100 millis")),
        Effect.ignore,
        Effect.andThen(Effect.suspend(() => {
          epochs.all()
          if (unsettled) return settleRound
          settling = false
          return Effect.void
        }))
      )
    })
    const unsettle = Effect.suspend(() => {
      unsettled = true
      if (settling) return Effect.void
      settling = true
      return Effect.asVoid(Effect.forkIn(settleRound, scope))
    })

    const written = (ids: ReadonlyArray<number> | undefined, kind: WriteKind, outcome: WriteOutcome): Effect.Effect<void> =>
      Effect.suspend(() => {
        epochs.written(ids, kind)
        const settle = outcome === "unknown" && options.feed === undefined ? unsettle : Effect.void
        if (shared === undefined) return settle
        return shared.bump(ids, kind).pipe(
          Effect.catch((error) =>
            Effect.andThen(
              Effect.sync(() => readCacheInvalidationErrorsTotal.inc()),
              Effect.logWarning("Read cache: generations not bumped in Redis; other instances learn of the write from PostgreSQL", error.cause)
            )
          ),
          Effect.andThen(settle)
        )
      })

    return ReadCache.of({
      generationKey: (scope) =>
        !enabled || shared === undefined ? undefined : scope === LIST_SCOPE ? LIST_GENERATION : { key: generationKeyOf(scope), record: false },
      tag,
      read,
      peek: (key, tag) => {
        const hit = store.get(key, tag, now())
        if (hit !== undefined) readCacheHitsTotal.inc()
        return hit
      },
      keep: (key, tag, answer) => {
        store.put(key, tag, answer)
      },
      written,
      now,
      bootId: randomBytes(6).toString("base64url")
    })
  })

const fromConfig = (shared: SharedGenerations | undefined) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const pg = yield* PgClient.PgClient
    return yield* makeReadCache({
      maxBytes: config.readCacheMaxBytes,
      maxAgeMs: config.readCacheMaxAgeSeconds * 1000,
      shared,
      // The pool's settings: the feed's connection is the pool's kind, its own.
      feed: Option.isSome(config.databaseUrl) ? (sink) => runChangeFeed(pg.config, sink) : undefined,
      settled: Effect.asVoid(pg`SELECT 1`)
    })
  })

/** A cache that stores nothing and bumps nothing: `ReadCache.layerNone`, and a base for tests' own. */
export const noReadCache: ReadCacheShape = {
  generationKey: () => undefined,
  tag: () => undefined,
  read: (_key, _tag, load) => load,
  peek: () => undefined,
  keep: () => {},
  written: () => Effect.void,
  now: () => 0,
  bootId: "none"
}

export class ReadCache extends Context.Service<ReadCache, ReadCacheShape>()("Authors/ReadCache") {
  /** One instance: generations in this process. */
  static readonly layerMemory = Layer.effect(ReadCache, fromConfig(undefined))
  /** Generations in Redis, shared by every instance. */
  static readonly layerRedis = Layer.effect(ReadCache, Effect.flatMap(RedisClient, ({ client, prefix }) => fromConfig(redisGenerations(client, prefix))))
  /** A cache that stores nothing and bumps nothing (tests of the transports alone). */
  static readonly layerNone = Layer.succeed(ReadCache, noReadCache)
}
