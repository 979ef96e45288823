/**
 * Every committed write to `authors`, whoever made it, as it commits: the triggers of
 * migrations/0007_authors_notify_every_write.sql NOTIFY what a statement changed on
 * `authors_changed`, and this feed LISTENs on a connection of its own (not one of the pool's, which
 * serve statements). It tells its sink when it is listening (`up`), when it may be missing
 * notifications (`down`: the connection failed, or did not answer the heartbeat in time), and what
 * changed.
 *
 * The heartbeat (`SELECT 1` every HEARTBEAT_EVERY_MS, answered within HEARTBEAT_TIMEOUT_MS) bounds
 * how long a connection that silently stopped delivering (half-open, black-holed) can go
 * unnoticed: a notification lost that way is noticed within their sum, well under the read
 * cache's 1 s for a committed write, and the cache is bypassed from then on until LISTEN is back.
 *
 * A failed session is abandoned, not waited for: closing a listener sends UNLISTEN, which a
 * black-holed connection never answers (it ends with the socket's keepalive). So recovery and
 * shutdown never wait on it.
 */
import * as PgConnection from "@effect/sql-pg/PgConnection"
import { Cause, Data, Deferred, Effect, Exit, Queue } from "effect"
import { detached } from "../Db/Deadline.ts"

export const CHANGES_CHANNEL = "authors_changed"

export const HEARTBEAT_EVERY_MS = 250
export const HEARTBEAT_TIMEOUT_MS = 500
const RETRY_MIN_MS = 100
const RETRY_MAX_MS = 2_000

export interface FeedSink {
  /** LISTEN is confirmed: from now on every committed write is notified. */
  readonly up: () => void
  /** Notifications may be missed from now on. */
  readonly down: () => void
  /** One notification's payload: `c:`, `u:` or `d:` and ids separated by commas, or `all`. */
  readonly changed: (payload: string) => void
}

/** The LISTEN connection did not answer its heartbeat in time: it may be missing notifications. */
class HeartbeatMissed extends Data.TaggedError("HeartbeatMissed")<{ readonly ms: number; readonly message: string }> {
  static readonly of = (ms: number) =>
    new HeartbeatMissed({ ms, message: `PostgreSQL did not answer the LISTEN connection's heartbeat within ${ms} ms` })
}

/** One LISTEN session; `ended` is completed the moment it stops delivering (before its cleanup). */
const session = (config: PgConnection.Config, sink: FeedSink, ended: Deferred.Deferred<Cause.Cause<unknown>>) =>
  Effect.scoped(Effect.gen(function*() {
    const connection = yield* PgConnection.make(config)
    // Pinned, so the heartbeat runs on the listening session itself.
    const pinned = yield* connection.pin
    const notifications = yield* pinned.listen(CHANGES_CHANNEL)
    sink.up()
    const deliver = Effect.forever(Effect.flatMap(Queue.take(notifications), (n) => Effect.sync(() => sink.changed(n.payload))))
    const heartbeat = Effect.forever(Effect.andThen(
      Effect.sleep(HEARTBEAT_EVERY_MS),
      detached(pinned.query("SELECT 1", [], false), HEARTBEAT_TIMEOUT_MS, Effect.void, () => HeartbeatMissed.of(HEARTBEAT_TIMEOUT_MS))
    ))
    return yield* Effect.raceFirst(deliver, heartbeat)
  }).pipe(Effect.onExit((exit) => Effect.sync(() => Deferred.doneUnsafe(ended, Effect.succeed(Exit.isFailure(exit) ? exit.cause : Cause.empty))))))

/**
 * Runs the feed until interrupted: a session, and after it fails a new one (backoff from 100 ms to
 * 2 s). `down` comes before each retry; a change of state is logged once.
 */
export const runChangeFeed = (config: PgConnection.Config, sink: FeedSink): Effect.Effect<never> =>
  Effect.gen(function*() {
    let wait = RETRY_MIN_MS
    let listening = false
    const watched: FeedSink = {
      up: () => {
        listening = true
        wait = RETRY_MIN_MS
        sink.up()
      },
      down: sink.down,
      changed: sink.changed
    }
    while (true) {
      const ended = Deferred.makeUnsafe<Cause.Cause<unknown>>()
      // Detached, not a child: a failed session is abandoned (its cleanup may wait on a dead socket),
      // yet it runs with this fiber's services (logger, tracer).
      const fiber = yield* Effect.forkDetach(session(config, watched, ended), { startImmediately: true })
      const cause = yield* Deferred.await(ended).pipe(Effect.onInterrupt(() => Effect.sync(() => fiber.interruptUnsafe())))
      sink.down()
      fiber.interruptUnsafe()
      if (listening) {
        yield* Effect.logWarning("Read cache bypassed: the LISTEN connection for committed writes was lost; reconnecting", cause)
      } else if (wait === RETRY_MIN_MS) {
        yield* Effect.logWarning("Read cache bypassed: LISTEN for committed writes is not established; retrying", cause)
      }
      listening = false
      yield* Effect.sleep(wait)
      wait = Math.min(wait * 2, RETRY_MAX_MS)
    }
  })
