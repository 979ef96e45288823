/**
 * The audit writers' fibers (src/AuditLogs/Supervise.ts, docs/audit.md#the-redis-journal): one that
 * dies or fails is logged once per stop, with its cause, and runs again after a pause; one that
 * runs is left alone; closing the scope ends it, and is not logged as a stop.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Logger, Scope } from "effect"
import { TestClock } from "effect/testing"
import { RESTART_PAUSE, supervised } from "../../src/AuditLogs/Supervise.ts"

describe("audit fibers are supervised", () => {
  it.effect("a run that dies or fails is logged with its cause and started again; closing the scope ends it quietly", () =>
    Effect.gen(function*() {
      const logged: Array<{ message: unknown; cause: string }> = []
      const logger = Logger.layer([Logger.make(({ cause, message }) => void logged.push({ message, cause: Cause.pretty(cause) }))])
      let runs = 0
      const run = Effect.suspend(() => {
        runs++
        return runs === 1 ? Effect.die(new Error("a bug on a rare path")) : runs === 2 ? Effect.fail("refused") : Effect.never
      })
      const scope = yield* Scope.make()
      const fiber = yield* supervised("test fiber", run).pipe(Scope.provide(scope), Effect.provide(logger))
      yield* Effect.yieldNow
      expect(runs).toBe(1)
      yield* TestClock.adjust(RESTART_PAUSE)
      expect(runs).toBe(2)
      yield* TestClock.adjust(RESTART_PAUSE)
      expect(runs).toBe(3)
      yield* TestClock.adjust(RESTART_PAUSE)
      expect(runs).toBe(3)
      expect(logged.map((l) => l.message)).toEqual([["Audit test fiber stopped; starting it again"], ["Audit test fiber stopped; starting it again"]])
      expect(logged[0]!.cause).toContain("a bug on a rare path")
      expect(logged[1]!.cause).toContain("refused")
      yield* Scope.close(scope, Exit.void)
      expect(Exit.hasInterrupts(yield* Fiber.await(fiber))).toBe(true)
      expect(logged).toHaveLength(2)
    }))
})
