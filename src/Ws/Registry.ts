/**
 * The connection registry (docs/websocket.md#many-instances): per-user connection slots, broadcasts and session expiry,
 * shared by every instance. Two implementations behind this interface pass one contract test
 * suite: in-process (here, one instance) and Redis (RedisRegistry.ts, many instances).
 */
import { Context, Effect, Layer } from "effect"
import { AuthorEvents } from "../Authors/Authors.ts"
import type { AuthorEvent } from "../Domain/Author.ts"
import { WebSocketProbe } from "../Observability/Health.ts"
import { makeRedisRegistryFromConfig } from "./RedisRegistry.ts"
import { type ConnectionRegistryShape, makeListeners, makeSessionTimers } from "./RegistryBase.ts"


/** One instance: slots in a map, sessions on timers, broadcasts straight to the listeners. */
export const makeMemoryRegistry = Effect.gen(function*() {
  const slots = new Map<string, Set<string>>()
  let held = 0
  const listeners = makeListeners()
  const sessions = makeSessionTimers(listeners.expired)
  yield* Effect.addFinalizer(() => Effect.sync(sessions.clear))
  const registry: ConnectionRegistryShape = {
    acquire: (userId, connectionId, max) =>
      Effect.sync(() => {
        let mine = slots.get(userId)
        if (mine === undefined) {
          mine = new Set()
          slots.set(userId, mine)
        }
        if (mine.has(connectionId)) return true
        if (mine.size >= max) return false
        mine.add(connectionId)
        held++
        return true
      }),
    release: (userId, connectionId) =>
      Effect.sync(() => {
        const mine = slots.get(userId)
        if (mine?.delete(connectionId) === true) held--
        if (mine?.size === 0) slots.delete(userId)
      }),
    startSession: (connectionId, expiresAtMs) => Effect.sync(() => sessions.start(connectionId, expiresAtMs)),
    endSession: (connectionId) => Effect.sync(() => sessions.cancel(connectionId)),
    broadcast: (message) => Effect.sync(() => listeners.broadcast(message)),
    listen: (listener) => Effect.asVoid(listeners.add(listener)),
    check: Effect.void,
    localConnections: Effect.sync(() => held)
  }
  return registry
})

export class ConnectionRegistry extends Context.Service<ConnectionRegistry, ConnectionRegistryShape>()("Ws/ConnectionRegistry") {
  /** One instance: this process's slots, sessions and listeners. */
  static readonly layerMemory = Layer.effect(ConnectionRegistry, makeMemoryRegistry)
  /** Every instance: slots, sessions and broadcasts in Redis (needs `RedisClient`). */
  static readonly layerRedis = Layer.effect(ConnectionRegistry, makeRedisRegistryFromConfig)
}

/** Author changes become broadcasts (the `Authors` service announces; the registry delivers). */
export const layerAuthorEvents = Layer.effect(
  AuthorEvents,
  Effect.map(ConnectionRegistry, (registry) => ({
    publish: (event: AuthorEvent) =>
      registry.broadcast({ event: event.event, timestamp: new Date().toISOString(), author: event.author })
  }))
)

/** `/health`'s WebSocket part: the registry's store, and this instance's open connections. */
export const layerWebSocketProbe = Layer.effect(
  WebSocketProbe,
  Effect.map(ConnectionRegistry, (registry) => ({ check: registry.check, activeConnections: registry.localConnections }))
)
