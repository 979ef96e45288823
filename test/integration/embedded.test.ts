/**
 * The embedded database (docs/operations.md#the-embedded-database): PGlite starts and runs in a
 * thread of its own, so the service's event loop keeps turning meanwhile.
 */
import { Effect, Exit, Option, Scope } from "effect"
import { describe, expect, it } from "vitest"
import { embeddedPostgres } from "../../src/Db/Database.ts"

describe("the embedded database", () => {
  it("starts off the event loop: the loop's longest stall meanwhile is a small part of the start", async () => {
    let last = performance.now()
    let longest = 0
    const ticker = setInterval(() => {
      const now = performance.now()
      longest = Math.max(longest, now - last)
      last = now
    }, 5)
    const scope = Effect.runSync(Scope.make())
    const started = performance.now()
    try {
      await Effect.runPromise(Scope.provide(embeddedPostgres({ dataDir: Option.none(), maxConnections: 4 }), scope))
    } finally {
      clearInterval(ticker)
    }
    const took = performance.now() - started
    await Effect.runPromise(Scope.close(scope, Exit.void))
    // In the service's own thread PGlite's start is one synchronous stretch of nearly all of it.
    expect(longest).toBeLessThan(took / 2)
  })
})
