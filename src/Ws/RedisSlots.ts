/**
 * The connection registry's slots in Redis (docs/websocket.md#many-instances): how many
 * connections each user holds across every instance, against WS_MAX_CONNECTIONS_PER_USER.
 *
 * One sorted set per user, a member per connection scored by its lease's end. Acquiring is one Lua
 * script (drop expired leases, count, admit; RedisWire.ts): exact under concurrency and across
 * instances. Each instance renews its leases every third of `slotTtlMs` (RedisRegistry.ts runs
 * `renew`), so a killed instance's slots free themselves within `slotTtlMs` (WS_SLOT_TTL_SECONDS,
 * default 30 s). Leases are measured on Redis's clock (`TIME` inside the scripts), so instances
 * whose clocks differ agree on when a lease ends. Renewing is a script too: a lease still there is
 * extended; one that is gone (it ran out while this instance could not reach Redis, or Redis
 * restarted) is put back only while the user has fewer than `max` — so a renewal after an outage
 * never lifts a user above the limit. A connection left out stays open (it was admitted) and is
 * counted again as soon as one of the user's slots frees.
 *
 * Each script and command names one key (a user's slots): in a Redis Cluster each runs on the
 * primary of its key's slot, and users spread over every primary (docs/configuration.md#redis-keys).
 */
import { Effect } from "effect"
import { COMMAND_TIMEOUT_MS, defineScript, isDisconnected, redisCommand, type RedisConnection } from "../Store/Redis.ts"
import { ACQUIRE_SLOT_LUA, RENEW_SLOTS_LUA } from "./RedisWire.ts"
import { RegistryUnavailable } from "./RegistryBase.ts"

export interface RedisSlotsOptions {
  readonly client: RedisConnection
  /** REDIS_KEY_PREFIX: a user's slots are `<prefix>ws:slots:<user id>`. */
  readonly prefix: string
  /** This instance, in every member it adds (`<instance>:<connection id>`). */
  readonly instance: string
  /** How long a slot outlives its instance's last renewal. */
  readonly slotTtlMs: number
}

export const makeRedisSlots = (options: RedisSlotsOptions) => {
  const { client, prefix, instance, slotTtlMs } = options
  const acquireSlot = defineScript<number>(client, "adsAcquireSlot", 1, ACQUIRE_SLOT_LUA)
  const renewSlots = defineScript<Array<string>>(client, "adsRenewSlots", 1, RENEW_SLOTS_LUA)
  const slotsKey = (userId: string) => `${prefix}ws:slots:${userId}`
  /** member → its user's slots key and limit, for renewal and for release at shutdown. */
  const held = new Map<string, { readonly key: string; readonly max: number }>()
  const member = (connectionId: string) => `${instance}:${connectionId}`

  /** Connections of this instance the last renewal could not count (their users were at the limit). */
  let lastUncounted = 0
  /** One script per user, sent together (auto-pipelined): leases extended, lost ones put back if they fit. */
  const renew = Effect.suspend(() => {
    if (held.size === 0 || isDisconnected(client)) return Effect.void
    const byKey = new Map<string, { max: number; members: Array<string> }>()
    for (const [m, { key, max }] of held) {
      const entry = byKey.get(key)
      if (entry === undefined) byKey.set(key, { max, members: [m] })
      else entry.members.push(m)
    }
    return redisCommand(
      "EVALSHA renew_slots",
      () => Promise.all([...byKey].map(([key, { max, members }]) => renewSlots(key, slotTtlMs, max, ...members))),
      COMMAND_TIMEOUT_MS * 2
    ).pipe(Effect.flatMap((left) => {
      const uncounted = left.reduce((n, members) => n + members.length, 0)
      const changed = uncounted !== lastUncounted
      lastUncounted = uncounted
      // Said once per change, not at every renewal.
      return uncounted === 0 || !changed ? Effect.void : Effect.logWarning(
        `${uncounted} WebSocket connection(s) of this instance not counted: their users hold WS_MAX_CONNECTIONS_PER_USER ` +
          "slots already (admitted while the registry could not decide, or their leases ran out); counted again when a slot frees"
      )
    }))
  }).pipe(Effect.catch((error) => Effect.logWarning("WebSocket slot leases not renewed", error.cause)))

  /** `ConnectionRegistryShape.acquire`. */
  const acquire = (userId: string, connectionId: string, max: number): Effect.Effect<boolean, RegistryUnavailable> =>
    Effect.gen(function*() {
      const key = slotsKey(userId)
      const m = member(connectionId)
      // Undecided (Redis unreachable): the slot is held here and renewed into Redis once it is
      // back; the caller releases it if it refuses the connection (RATE_LIMIT_FAIL_MODE=closed).
      const undecided = (cause: unknown) =>
        Effect.andThen(Effect.sync(() => held.set(m, { key, max })), Effect.fail(new RegistryUnavailable({ cause })))
      if (isDisconnected(client)) return yield* undecided(new Error(`Redis ${client.status}`))
      const admitted = yield* redisCommand("EVALSHA acquire_slot", () => acquireSlot(key, slotTtlMs, max, m)).pipe(
        Effect.catch((error) => undecided(error.cause))
      )
      if (admitted === 1) held.set(m, { key, max })
      return admitted === 1
    })

  /** `ConnectionRegistryShape.release`. */
  const release = (userId: string, connectionId: string) =>
    Effect.suspend(() => {
      const m = member(connectionId)
      if (!held.delete(m)) return Effect.void
      return redisCommand("ZREM", () => client.zrem(slotsKey(userId), m)).pipe(
        Effect.catch((error) => Effect.logWarning("WebSocket slot not released; its lease will expire", error.cause))
      )
    })

  /** At shutdown: every slot this instance holds given back (what is not, expires with its lease). */
  const releaseAll = Effect.suspend(() => {
    if (held.size === 0) return Effect.void
    const leases = [...held]
    held.clear()
    return redisCommand("ZREM (shutdown)", () => Promise.all(leases.map(([m, { key }]) => client.zrem(key, m)))).pipe(Effect.ignore)
  })

  return {
    acquire,
    release,
    /** One renewal pass: the registry runs it on a schedule and on every reconnection. */
    renew,
    releaseAll,
    /** Slots held by this instance: its open connections. */
    held: Effect.sync(() => held.size)
  }
}
