/**
 * The audit trail's write side (docs/audit.md#guarantees): `record` never waits for the database.
 */
import { Context, Effect, Layer } from "effect"
import type { AuditEntry } from "./Entry.ts"
import { AuditRepo } from "./Repo.ts"
import { makeStreamAuditLog } from "./StreamWriter.ts"
import { makeBufferedAuditLog } from "./Writer.ts"

export class AuditLog extends Context.Service<AuditLog, {
  /** Buffers a record; returns at once. */
  readonly record: (entry: AuditEntry) => Effect.Effect<void>
}>()("AuditLogs/AuditLog") {
  /** Records buffered in this process and inserted in batches (needs `SqlClient`). */
  static readonly layer = Layer.effect(AuditLog, makeBufferedAuditLog()).pipe(Layer.provide(AuditRepo.layer))
  /**
   * Records appended to a Redis Stream before the request is answered, and inserted from there in
   * batches by whichever instance holds them (needs `SqlClient` and `RedisClient`).
   */
  static readonly layerRedis = Layer.effect(AuditLog, makeStreamAuditLog()).pipe(Layer.provide(AuditRepo.layer))
  /** AUDIT_LOG_ENABLED=false: records go nowhere. */
  static readonly layerNone: Layer.Layer<AuditLog> = Layer.succeed(AuditLog, { record: () => Effect.void })
}
