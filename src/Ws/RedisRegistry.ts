/**
 * The Redis implementation of `ConnectionRegistry` (docs/websocket.md#many-instances), for many
 * instances: its three parts over two connections (commands, and one subscriber), and their
 * recovery on every reconnection.
 *
 * - Slots (RedisSlots.ts): a sorted set of leases per user, renewed by each instance, so the
 *   per-user limit holds across instances and a killed instance's slots free themselves.
 * - Broadcasts (RedisBroadcasts.ts): PUBLISH on one channel that every instance subscribes to.
 * - Sessions (RedisSessions.ts): a key per connection whose expiry event closes it, and a timer of
 *   this instance's own per session as the backstop (the only one where Redis sends no events).
 *
 * The subscriber connection is shared: this module subscribes it to both channels and hands each
 * message to its part. Recovery is here because it is only correct when it restores all three
 * together: on every (re)connection of either connection (a Redis restart forgets a `CONFIG SET`
 * and every key), this instance re-enables the key-expiry events (when CONFIG is permitted),
 * subscribes its channels again (the subscriber connection is made without ioredis's own
 * resubscribe, Store/Redis.ts `RedisSubscriber`; in a cluster ioredis subscribes again itself when
 * another primary takes the channel's slot), and writes its slot leases and session keys back, so
 * broadcasts, expiry events and the per-user limit work again at once.
 *
 * Every key and channel carries REDIS_KEY_PREFIX. Each script and command names one key (a user's
 * slots, one session), never a pipeline of several: in a Redis Cluster each runs on the primary of
 * its key's slot, and users spread over every primary (docs/configuration.md#redis-keys).
 */
import { Effect, FiberSet, Queue, Schedule } from "effect"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { AppConfig } from "../Config.ts"
import { RedisClient } from "../Store/Redis.ts"
import { makeRedisBroadcasts } from "./RedisBroadcasts.ts"
import { makeRedisSessions } from "./RedisSessions.ts"
import { makeRedisSlots } from "./RedisSlots.ts"
import { type ConnectionRegistryShape, makeListeners } from "./RegistryBase.ts"

export interface RedisRegistryOptions {
  /** How long a slot outlives its instance's last renewal. */
  readonly slotTtlMs: number
}

export const makeRedisRegistry = (options: RedisRegistryOptions) =>
  Effect.gen(function*() {
    const redis = yield* RedisClient
    const { client, prefix } = redis
    /**
     * A Redis Cluster sends each key's expiry event from the node that holds the key, and only to
     * that node's subscribers: sessions end on this instance's timers there, which ask Redis for
     * the key at the session's end (docs/websocket.md#many-instances).
     */
    const expiryEvents = redis.mode !== "cluster"
    const instance = `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`
    const slots = makeRedisSlots({ client, prefix, instance, slotTtlMs: options.slotTtlMs })
    const fibers = yield* FiberSet.make()
    const run = yield* FiberSet.runtime(fibers)<never>()
    const listeners = makeListeners()

    const subscriber = yield* redis.subscriber
    const sessions = makeRedisSessions({ client, subscriber, prefix, instance, expiryEvents, run, onExpired: listeners.expired })
    const broadcasts = makeRedisBroadcasts({ redis, subscriber, run, deliver: listeners.broadcast })
    subscriber.onMessage((channel, message) => {
      if (channel === broadcasts.channel) broadcasts.onMessage(message)
      else if (channel === sessions.expiredChannel) sessions.onExpiredKey(message)
    })
    /**
     * The two channels are subscribed one at a time: Redis refuses a SUBSCRIBE whole when its ACL
     * denies one channel, and an ACL that allows only `&<prefix>*` must still get broadcasts
     * (docs/troubleshooting.md). Without the key-expiry channel, sessions end on the timers. Both
     * are marked unsubscribed before either SUBSCRIBE is sent.
     */
    const subscribe = Effect.suspend(() => {
      const broadcastsAgain = broadcasts.resubscribe()
      const expiredAgain = sessions.resubscribe()
      return Effect.andThen(broadcastsAgain, expiredAgain)
    })

    /** Everything a Redis restart takes away, put back; run on every (re)connection. */
    const recover = Effect.gen(function*() {
      yield* sessions.ensureExpiredEvents
      if (subscriber.connection.status === "ready") yield* subscribe
      yield* slots.renew
      yield* sessions.restore
    })

    yield* sessions.ensureExpiredEvents
    yield* subscribe

    // Either connection ready again (the first time included): one recovery pass per burst.
    const reconnected = yield* Queue.dropping<void>(1)
    const signal = () => {
      Queue.offerUnsafe(reconnected, undefined)
    }
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        client.on("ready", signal)
        subscriber.connection.on("ready", signal)
      }),
      () =>
        Effect.sync(() => {
          client.off("ready", signal)
          subscriber.connection.off("ready", signal)
        })
    )
    yield* Effect.forkScoped(Effect.forever(Effect.andThen(Queue.take(reconnected), recover)))
    yield* Effect.forkScoped(Effect.repeat(slots.renew, Schedule.spaced(Math.max(100, Math.floor(options.slotTtlMs / 3)))))

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        sessions.clear()
        return slots.releaseAll
      })
    )

    const registry: ConnectionRegistryShape & { readonly renewLeases: Effect.Effect<void> } = {
      acquire: slots.acquire,
      release: slots.release,
      startSession: sessions.start,
      endSession: sessions.end,
      broadcast: broadcasts.publish,
      listen: (listener) => Effect.asVoid(listeners.add(listener)),
      check: broadcasts.check,
      localConnections: slots.held,
      // Not part of the interface: one renewal pass now (what the schedule runs), for tests.
      renewLeases: slots.renew
    }
    return registry
  })

/** The Redis registry with WS_SLOT_TTL_SECONDS (`ConnectionRegistry.layerRedis`). */
export const makeRedisRegistryFromConfig = Effect.flatMap(AppConfig, (config) => makeRedisRegistry({ slotTtlMs: config.wsSlotTtlSeconds * 1000 }))
