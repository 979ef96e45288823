/**
 * The Redis Stream audit buffer keeps its cap while PostgreSQL is down (CONTRACT §6 "the Redis
 * Stream buffer keeps its cap during a database outage"): with nothing committed, the stream's
 * length still comes back with every append, and records past the cap are counted, not appended.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { SqlError } from "effect/sql"
import { randomUUID } from "node:crypto"
import type { AuditEntry } from "../../src/AuditLogs/AuditLog.ts"
import { AuditRepo } from "../../src/AuditLogs/Repo.ts"
import { makeStreamAuditLog } from "../../src/AuditLogs/StreamWriter.ts"
import { defaultWriterOptions } from "../../src/AuditLogs/Writer.ts"
import { AppConfig } from "../../src/Config.ts"
import { auditRecordsDroppedTotal } from "../../src/Observability/Metrics.ts"
import { RedisClient, redisLayer } from "../../src/Store/Redis.ts"
import { TEST_REDIS_URL } from "../support/TestApp.ts"

const entry = (n: number): AuditEntry => ({
  timestamp: new Date(), user_id: "u", username: "user", user_roles: [], action_type: "GET", resource: `/authors/${n}`,
  outcome: "success", ip_address: "127.0.0.1", user_agent: "test", request_id: `r${n}`, correlation_id: "c",
  response_status: 200, duration_ms: 1, request_data: {}, error_message: null
})

/** PostgreSQL unreachable for the whole test. */
const DownRepo = Layer.succeed(AuditRepo, AuditRepo.of({
  insertBatch: () =>
    Effect.fail(new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: new Error("ECONNREFUSED"), message: "down", operation: "connect" }) })),
  page: () => Effect.die("unused"),
  findById: () => Effect.die("unused"),
  statements: { pageRows: () => { throw new Error("unused") }, total: () => { throw new Error("unused") } }
}))

const streamFull = async () => (await auditRecordsDroppedTotal.get()).values.find((v) => v.labels["reason"] === "stream_full")?.value ?? 0

const prefix = `test:${randomUUID()}:`

describe.runIf(TEST_REDIS_URL !== undefined)("audit Redis Stream during a PostgreSQL outage", () => {
  it.live("holds its cap: records past streamMax are counted stream_full, the stream stops growing", () =>
    Effect.gen(function*() {
      const before = yield* Effect.promise(streamFull)
      const audit = yield* makeStreamAuditLog({ ...defaultWriterOptions, streamMax: 5, flushTimeout: "100 millis" })
      // One at a time, each awaited as a request awaits its record.
      for (let i = 0; i < 12; i++) yield* audit.record(entry(i))
      const { client } = yield* RedisClient
      const length = yield* Effect.promise(() => client.xlen(`${prefix}audit:stream`))
      expect(length).toBe(5)
      expect((yield* Effect.promise(streamFull)) - before).toBe(7)
      yield* Effect.promise(() => client.del(`${prefix}audit:stream`))
    }).pipe(
      Effect.scoped,
      Effect.provide(Layer.mergeAll(DownRepo, AppConfig.layerWith({ port: 0 }))),
      Effect.provide(redisLayer(Redacted.make(TEST_REDIS_URL ?? ""), prefix))
    ))
})
