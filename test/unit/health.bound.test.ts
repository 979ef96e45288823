/**
 * docs/operations.md#health-and-probes: every /health check is bounded by 1 s and they run in parallel — with every probe
 * hanging (a database or Redis that accepts and never answers), the report still comes and says
 * so; and the three checks run together, not one after the other.
 */
import { Deferred, Effect, Layer } from "effect"
import { describe, expect, it } from "vitest"
import { CacheProbe, DatabaseProbe, Health, WebSocketProbe, type Probe } from "../../src/Observability/Health.ts"

const report = (probes: { readonly database: Probe; readonly cache: Probe; readonly websocket: Probe }) =>
  Effect.runPromise(
    Effect.flatMap(Effect.service(Health), (h) => h.check).pipe(
      Effect.provide(Health.layer.pipe(Layer.provide(Layer.mergeAll(
        Layer.succeed(DatabaseProbe, probes.database),
        Layer.succeed(CacheProbe, probes.cache),
        Layer.succeed(WebSocketProbe, { check: probes.websocket, activeConnections: Effect.succeed(3) })
      ))))
    )
  )

describe("/health's bound", () => {
  it("three probes that never answer: the report still comes, all unhealthy, after the 1 s bound", async () => {
    const started = performance.now()
    const hanging = await report({ database: Effect.never, cache: Effect.never, websocket: Effect.never })
    expect(hanging).toEqual({
      status: "unhealthy",
      database: "unhealthy",
      redis: "unhealthy",
      websocket: { status: "unhealthy", active_connections: 3 }
    })
    // A probe is given its whole second (a lower bound: a busy machine only makes it later).
    expect(performance.now() - started).toBeGreaterThanOrEqual(990)
  })

  it("the checks run together: three probes that each answer only once all three have started are all healthy", async () => {
    // Run one after the other, the first would wait for the others until its bound: unhealthy.
    const all = Effect.runSync(Deferred.make<void>())
    let startedCount = 0
    const together: Probe = Effect.suspend(() => {
      if (++startedCount === 3) Deferred.doneUnsafe(all, Effect.void)
      return Deferred.await(all)
    })
    expect(await report({ database: together, cache: together, websocket: together })).toEqual({
      status: "healthy",
      database: "healthy",
      redis: "healthy",
      websocket: { status: "healthy", active_connections: 3 }
    })
    expect(startedCount).toBe(3)
  })
})
