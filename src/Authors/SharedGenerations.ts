/**
 * The read cache's generations every instance shares, in Redis (docs/architecture.md#its-invariants):
 * what a write bumps before its response (`BUMP_LUA`; on a Redis Cluster one script per slot), and a
 * reset whenever Redis may have lost or rolled back values. The rate check reads them
 * (RateLimit/RedisRateLimiter.ts).
 */
import { Effect } from "effect"
import type * as Lifetime from "effect/Scope"
import { defineScript, isDisconnected, modeOf, type RedisConnection, RedisError, redisCommand } from "../Store/Redis.ts"
import { nextGenerationLua } from "../Store/RedisLua.ts"
import { onPossibleRollback } from "../Store/RedisNodes.ts"
import { generationKeyOf, LIST_GENERATION_KEY, scopeOfId, type WriteKind } from "./Generations.ts"

/**
 * KEYS[1] = the list's record, KEYS[2…] = the shards of the statement's ids (none: its ids are
 * unknown); ARGV = the write's kind, then the ids in ascending order. The list's rule is
 * `ListGenerations.written`'s, applied to each id in turn; every value set is `next_generation`'s,
 * so none repeats.
 */
const BUMP_LUA = `${nextGenerationLua}local list = redis.call('HMGET', KEYS[1], 'rows', 'count', 'high')
local high = tonumber(list[3] or '0')
local rows = #ARGV < 2
for i = 2, #ARGV do
  local id = tonumber(ARGV[i])
  if ARGV[1] == 'create' and id >= high then high = id else rows = true end
end
if rows then
  redis.call('HSET', KEYS[1], 'rows', next_generation(list[1]), 'count', next_generation(list[2]), 'high', string.format('%.0f', high))
else
  redis.call('HSET', KEYS[1], 'count', next_generation(list[2]), 'high', string.format('%.0f', high))
end
for i = 2, #KEYS do redis.call('SET', KEYS[i], next_generation(redis.call('GET', KEYS[i]))) end
return 1
`

/** KEYS[1] = one id shard's generation: set to `next_generation`'s value (a Redis Cluster's bump, one slot per script). */
const SHARD_BUMP_LUA = `${nextGenerationLua}redis.call('SET', KEYS[1], next_generation(redis.call('GET', KEYS[1])))
return 1
`

/** Generations every instance shares (Redis): what a write bumps before its response. */
export interface SharedGenerations {
  /**
   * `BUMP_LUA`: the list's record and, for known ids (one statement's), their shards. Succeeds once
   * every one of them is bumped: a broadcast of the write follows it (Writes.ts `announce`).
   */
  readonly bump: (ids: ReadonlyArray<number> | undefined, kind: WriteKind) => Effect.Effect<void, RedisError>
  /**
   * Calls `reset` whenever the store may have lost or rolled back values (a reconnection; in a
   * cluster a node lost or a slot moved: `onPossibleRollback`), until the scope closes.
   */
  readonly onReset: (reset: () => void) => Effect.Effect<void, never, Lifetime.Scope>
}

/**
 * The generations in Redis. One server or a Sentinel group's primary: one script for the list's
 * record and the shards. A Redis Cluster: a script names keys of one slot, so the list's record
 * and each shard are bumped by scripts of their own, sent together (auto-pipelined, one write per
 * node).
 */
export const redisGenerations = (client: RedisConnection, prefix: string): SharedGenerations => {
  const bumpAll = defineScript<number>(client, "adsBumpGenerations", null, BUMP_LUA)
  // A fixed number of keys: ioredis routes (and auto-pipelines) a cluster's script by its first argument.
  const bumpList = defineScript<number>(client, "adsBumpList", 1, BUMP_LUA)
  const bumpShard = defineScript<number>(client, "adsBumpShardGeneration", 1, SHARD_BUMP_LUA)
  const listKey = `${prefix}${LIST_GENERATION_KEY}`
  const cluster = modeOf(client) === "cluster"
  return {
    bump: (ids, kind) => {
      if (isDisconnected(client)) return Effect.fail(new RedisError({ command: "EVALSHA bump_generations", cause: new Error(`Redis ${client.status}`) }))
      const ascending = ids === undefined ? [] : ids.length > 1 ? [...ids].sort((a, b) => a - b) : ids
      const shards = [...new Set(ascending.map(scopeOfId))].map((scope) => `${prefix}${generationKeyOf(scope)}`)
      return redisCommand("EVALSHA bump_generations", (): Promise<unknown> =>
        cluster
          ? Promise.all([bumpList(listKey, kind, ...ascending), ...shards.map((key) => bumpShard(key))])
          : bumpAll(1 + shards.length, listKey, ...shards, kind, ...ascending)).pipe(Effect.asVoid)
    },
    onReset: (reset) => Effect.asVoid(Effect.acquireRelease(Effect.sync(() => onPossibleRollback(client, reset)), (stop) => Effect.sync(stop)))
  }
}
