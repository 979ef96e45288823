/**
 * The connection registry's interface, and the pieces both implementations (in-process:
 * Registry.ts, Redis: RedisRegistry.ts and its RedisSessions.ts) use for this process's listeners
 * and session timers.
 */
import { Data, Effect, type Scope } from "effect"
import type { AuthorEvent, AuthorRow } from "../Domain/Author.ts"

/** What every instance delivers to its connections (docs/websocket.md#broadcasts). */
export interface BroadcastMessage {
  readonly event: AuthorEvent["event"]
  readonly timestamp: string
  readonly author: AuthorRow
}

export interface RegistryListener {
  readonly onBroadcast: (message: BroadcastMessage) => void
  /** A session of one of this instance's connections ended (token exp + grace). */
  readonly onSessionExpired: (connectionId: string) => void
}

/** The registry's store could not decide a slot (Redis down or not answering). */
export class RegistryUnavailable extends Data.TaggedError("RegistryUnavailable")<{ readonly cause: unknown }> {}

export interface ConnectionRegistryShape {
  /**
   * Claims one of the user's `max` slots (across all instances); false when all are taken. Fails
   * when the store cannot decide: the slot is then held until `release`.
   */
  readonly acquire: (userId: string, connectionId: string, max: number) => Effect.Effect<boolean, RegistryUnavailable>
  readonly release: (userId: string, connectionId: string) => Effect.Effect<void>
  /** Starts or extends a connection's session: it expires at `expiresAtMs` (epoch ms). */
  readonly startSession: (connectionId: string, expiresAtMs: number) => Effect.Effect<void>
  readonly endSession: (connectionId: string) => Effect.Effect<void>
  /** Delivered to the listeners of every instance, this one included. */
  readonly broadcast: (message: BroadcastMessage) => Effect.Effect<void>
  /** Subscribes this instance's WebSocket server until the scope closes. */
  readonly listen: (listener: RegistryListener) => Effect.Effect<void, never, Scope.Scope>
  /** Fails when the store is unreachable (health). */
  readonly check: Effect.Effect<void, unknown>
  /** Slots held by this instance: its open connections. */
  readonly localConnections: Effect.Effect<number>
}

/** `setTimeout` caps delays at 2^31-1 ms; longer sessions are re-armed. */
const MAX_TIMER_MS = 2_147_483_647

/** Session timers of this process (the in-process registry, and Redis without key-expiry events). */
export const makeSessionTimers = (onExpired: (connectionId: string) => void) => {
  const timers = new Map<string, ReturnType<typeof setTimeout>>()
  const arm = (connectionId: string, expiresAtMs: number) => {
    const delay = Math.max(0, expiresAtMs - Date.now())
    const timer = setTimeout(() => {
      timers.delete(connectionId)
      if (delay > MAX_TIMER_MS) arm(connectionId, expiresAtMs)
      else onExpired(connectionId)
    }, Math.min(delay, MAX_TIMER_MS))
    timer.unref()
    timers.set(connectionId, timer)
  }
  const cancel = (connectionId: string) => {
    clearTimeout(timers.get(connectionId))
    timers.delete(connectionId)
  }
  return {
    start: (connectionId: string, expiresAtMs: number) => {
      cancel(connectionId)
      arm(connectionId, expiresAtMs)
    },
    cancel,
    clear: () => {
      for (const timer of timers.values()) clearTimeout(timer)
      timers.clear()
    }
  }
}

/** Listeners of this process; a throwing listener does not stop the others. */
export const makeListeners = () => {
  const listeners = new Set<RegistryListener>()
  const each = (f: (listener: RegistryListener) => void) => {
    for (const listener of listeners) {
      try {
        f(listener)
      } catch {
        // a listener's own failure is its own; the others still get the message
      }
    }
  }
  return {
    add: (listener: RegistryListener) =>
      Effect.acquireRelease(Effect.sync(() => listeners.add(listener)), () => Effect.sync(() => listeners.delete(listener))),
    broadcast: (message: BroadcastMessage) => each((l) => l.onBroadcast(message)),
    expired: (connectionId: string) => each((l) => l.onSessionExpired(connectionId))
  }
}
