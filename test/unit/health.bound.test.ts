/**
 * docs/operations.md#health-and-probes: every /health check is bounded by 1 s and they run in parallel — with every probe
 * hanging (a database or Redis that accepts and never answers), the report says so in about 1 s,
 * not in 3 s (one after the other) nor when the stuck probes finally give up.
 */
import { Effect, Layer } from "effect"
import { describe, expect, it } from "vitest"
import { CacheProbe, DatabaseProbe, Health, WebSocketProbe } from "../../src/Observability/Health.ts"

describe("/health's bound", () => {
  it("three probes that never answer: all unhealthy, together, within the 1 s checks (serially it would be 3 s)", async () => {
    const Hanging = Layer.mergeAll(
      Layer.succeed(DatabaseProbe, Effect.never),
      Layer.succeed(CacheProbe, Effect.never),
      Layer.succeed(WebSocketProbe, { check: Effect.never, activeConnections: Effect.succeed(3) })
    )
    const started = performance.now()
    const report = await Effect.runPromise(Effect.flatMap(Effect.service(Health), (h) => h.check).pipe(Effect.provide(Health.layer.pipe(Layer.provide(Hanging)))))
    const ms = performance.now() - started
    expect(report).toEqual({
      status: "unhealthy",
      database: "unhealthy",
      redis: "unhealthy",
      websocket: { status: "unhealthy", active_connections: 3 }
    })
    expect(ms).toBeGreaterThanOrEqual(990)
    expect(ms).toBeLessThan(3000)
  })
})
