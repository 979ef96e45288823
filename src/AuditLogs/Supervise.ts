/**
 * The audit writers' background fibers (the journal's appender, committer and recovery scan, the
 * in-process buffer's writer) run under the scope of the Layer that made them, never detached:
 * closing the scope ends them. One that dies of a defect or fails is logged once, with the cause,
 * and started again after a pause, so one bad record or a bug on a rare path cannot stop a writer
 * for the life of the process (docs/audit.md#guarantees). Each keeps what it must not lose outside
 * the fiber (JournalState.ts, the buffer's batch in flight), so a new run takes up where the last
 * one stopped.
 */
import { Cause, Duration, Effect, type Fiber, type Scope } from "effect"

/** The pause before a fiber that stopped runs again: a fault that repeats costs one log line a second, not a busy loop. */
export const RESTART_PAUSE = Duration.seconds(1)

export const supervised = <E>(name: string, run: Effect.Effect<never, E>): Effect.Effect<Fiber.Fiber<never>, never, Scope.Scope> =>
  Effect.forkScoped(
    run.pipe(
      Effect.catchCause((cause) =>
        Cause.hasInterrupts(cause)
          ? Effect.failCause(cause)
          : Effect.logError(`Audit ${name} stopped; starting it again`, cause).pipe(Effect.andThen(Effect.sleep(RESTART_PAUSE)))
      ),
      Effect.forever,
      Effect.orDie
    )
  )
