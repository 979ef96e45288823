/**
 * The connection registry's broadcasts through Redis (docs/websocket.md#many-instances): an author
 * change reaches the connections of every instance.
 *
 * PUBLISH on one channel (`<prefix>ws:broadcast`); every instance (this one included) SUBSCRIBEs
 * and delivers to its own connections. In a Redis Cluster, sharded pub/sub (SPUBLISH, SSUBSCRIBE):
 * a broadcast goes to the primary holding the channel's slot and its subscribers, instead of being
 * copied to every node over the cluster bus. Anyone who can reach Redis can publish on the channel:
 * a message is forwarded only when it decodes as a broadcast (`BroadcastData`, RedisWire.ts), else
 * it is dropped, logged and counted (`ws_broadcasts_invalid_total`). When Redis cannot take a
 * broadcast, this instance's own connections still get it. RedisRegistry.ts subscribes the channel
 * again on every reconnection (`resubscribe`).
 */
import { Effect } from "effect"
import { wsBroadcastsInvalidTotal } from "../Observability/Metrics.ts"
import { COMMAND_TIMEOUT_MS, type RedisClientShape, redisCommand, type RedisSubscriber } from "../Store/Redis.ts"
import { parseBroadcast } from "./RedisWire.ts"
import type { BroadcastMessage } from "./RegistryBase.ts"

/** Own broadcasts remembered until their echo (see `ownEchoes`). */
const OWN_ECHOES_MAX = 1024

export interface RedisBroadcastsOptions {
  readonly redis: RedisClientShape
  /** The registry's subscriber connection, on which the broadcast channel is subscribed. */
  readonly subscriber: RedisSubscriber
  /** Runs an effect in the registry's fibers (from a message callback). */
  readonly run: (effect: Effect.Effect<void>) => unknown
  /** Hands a broadcast to this instance's listeners. */
  readonly deliver: (message: BroadcastMessage) => void
}

export const makeRedisBroadcasts = (options: RedisBroadcastsOptions) => {
  const { deliver, redis, run, subscriber } = options
  const channel = `${redis.prefix}ws:broadcast`
  /**
   * Broadcasts this instance published, by their text, until their echo arrives: the echo is
   * delivered as the message it was made from, not decoded again. Bounded: an echo that never
   * comes (the subscriber was reconnecting) is forgotten after OWN_ECHOES_MAX newer ones.
   */
  const ownEchoes = new Map<string, BroadcastMessage>()
  /** Whether `channel` is subscribed on the current subscriber connection (health). */
  let subscribed = false

  /** A message on `channel`. */
  const onMessage = (message: string) => {
    const own = ownEchoes.get(message)
    if (own !== undefined) {
      ownEchoes.delete(message)
      return deliver(own)
    }
    // The channel is prefixed, but anyone who can reach Redis may publish on it.
    const broadcast = parseBroadcast(message)
    if (typeof broadcast !== "string") return deliver(broadcast)
    wsBroadcastsInvalidTotal.inc()
    run(Effect.logWarning(`Broadcast channel message dropped: ${broadcast}`))
  }

  const subscribeBroadcasts = redisCommand("SUBSCRIBE", () => subscriber.subscribe([channel]), COMMAND_TIMEOUT_MS * 2).pipe(
    Effect.andThen(Effect.sync(() => {
      subscribed = true
    })),
    Effect.catch((error) => Effect.logWarning("Redis SUBSCRIBE failed; retried when the connection is back", error.cause))
  )
  /**
   * The channel marked unsubscribed at once (a new subscriber connection has no subscription), and
   * the SUBSCRIBE that subscribes it again.
   */
  const resubscribe = (): Effect.Effect<void> => {
    subscribed = false
    return subscribeBroadcasts
  }

  /** `ConnectionRegistryShape.broadcast`. */
  const publish = (message: BroadcastMessage): Effect.Effect<void> =>
    Effect.suspend(() => {
      const text = JSON.stringify(message)
      if (ownEchoes.size >= OWN_ECHOES_MAX) ownEchoes.delete(ownEchoes.keys().next().value!)
      ownEchoes.set(text, message)
      return redisCommand("PUBLISH", () => redis.publish(channel, text)).pipe(
        Effect.tapError(() => Effect.sync(() => ownEchoes.delete(text)))
      )
    }).pipe(
      Effect.asVoid,
      // Redis unreachable: this instance's clients still hear of the change.
      Effect.catch((error) =>
        Effect.andThen(
          Effect.logWarning("Broadcast not published to other instances (Redis unavailable)", error.cause),
          Effect.sync(() => deliver(message))
        )
      )
    )

  /** `ConnectionRegistryShape.check`: the subscriber ready and subscribed, and Redis answering. */
  const check = Effect.suspend((): Effect.Effect<void, unknown> =>
    subscriber.connection.status !== "ready"
      ? Effect.fail(new Error(`Redis subscriber ${subscriber.connection.status}`))
      : !subscribed
      ? Effect.fail(new Error(`Redis subscriber: not subscribed to ${channel}`))
      : redis.ping
  )

  return { channel, onMessage, resubscribe, publish, check }
}
