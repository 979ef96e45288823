/** Which audit writer runs, from the configuration (docs/audit.md#guarantees). */
import { Effect, Layer, Option } from "effect"
import { AppConfig } from "../Config.ts"
import { RedisClient } from "../Store/Redis.ts"
import { AuditLog } from "./AuditLog.ts"
import { AuditRepo } from "./Repo.ts"
import { makeStreamAuditLog } from "./StreamWriter.ts"
import { makeBufferedAuditLog } from "./Writer.ts"

/**
 * The `AuditLog` the configuration asks for: none when `AUDIT_LOG_ENABLED=false`, the Redis Stream
 * writer when Redis is configured, else the in-process writer. Needs `SqlClient`.
 */
export const AuditLogLive = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  if (!config.auditLogEnabled) return AuditLog.none
  const redis = yield* Effect.serviceOption(RedisClient)
  const writer = Option.isSome(redis)
    ? Layer.effect(AuditLog, makeStreamAuditLog()).pipe(Layer.provide(Layer.succeed(RedisClient, redis.value)))
    : Layer.effect(AuditLog, makeBufferedAuditLog())
  return writer.pipe(Layer.provide(AuditRepo.layer))
}))
