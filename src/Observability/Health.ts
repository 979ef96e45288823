/**
 * `/health` (docs/operations.md#health-and-probes): every check runs in parallel, bounded by 1 s;
 * 503 with the same shape when any dependency is unhealthy. `identity` is there with an OIDC
 * provider only.
 */
import { SqlClient } from "effect/sql"
import { Context, Effect, Exit, Layer, Option } from "effect"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { detached } from "../Db/Deadline.ts"
import { RedisClient } from "../Store/Redis.ts"
import { type Dependency, Outages } from "./Outages.ts"

export type Status = "healthy" | "unhealthy"

export interface HealthReport {
  readonly status: Status
  readonly database: Status
  readonly redis: Status
  readonly websocket: { readonly status: Status; readonly active_connections: number }
  /** With an OIDC provider only: its signing keys are held, or can be fetched now. */
  readonly identity?: Status
}

/** A dependency check: succeeds when healthy. */
export type Probe = Effect.Effect<void, unknown>

export class DatabaseProbe extends Context.Service<DatabaseProbe, Probe>()("Health/DatabaseProbe") {
  /** `SELECT 1` (needs `SqlClient`). */
  static readonly layer = Layer.effect(
    DatabaseProbe,
    Effect.map(SqlClient.SqlClient, (sql) => Effect.asVoid(sql`SELECT 1`))
  )
}

/** How long the write check's key lives: it is rewritten by every check, and never outlives them for long. */
const WRITE_CHECK_TTL_MS = 10_000

/**
 * The cache store (Redis); the in-process store is always healthy. Redis is healthy only when it
 * takes a write under REDIS_KEY_PREFIX (docs/operations.md#health-and-probes): a Redis that
 * answers PING but refuses writes — an ACL without write rights on the prefix, a read-only replica,
 * `maxmemory` reached with `noeviction` — fails every rate-limit check and audit append.
 */
export class CacheProbe extends Context.Service<CacheProbe, Probe>()("Health/CacheProbe") {
  /** The in-process store: always healthy. */
  static readonly layerMemory = Layer.succeed(CacheProbe, Effect.void)
  /** `SET <prefix>health:<instance> 1 PX 10000` (needs `RedisClient`). */
  static readonly layerRedis = Layer.effect(
    CacheProbe,
    Effect.map(RedisClient, (redis) => {
      const key = `${redis.prefix}health:${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`
      return redis.writeCheck(key, WRITE_CHECK_TTL_MS)
    })
  )
}

/**
 * The OIDC identity provider (Auth/OidcProvider.ts): healthy while its signing keys are held (from
 * any earlier fetch) or can be fetched now — without them no token verifies. Absent with the
 * built-in provider.
 */
export class IdentityProbe extends Context.Service<IdentityProbe, { readonly check: Probe }>()("Health/IdentityProbe") {}

/** The WebSocket subsystem: its registry's store, and this instance's open connections. */
export class WebSocketProbe extends Context.Service<WebSocketProbe, {
  readonly check: Probe
  readonly activeConnections: Effect.Effect<number>
}>()("Health/WebSocketProbe") {}

const TIMEOUT_MS = 1000

/**
 * A probe's verdict within 1 s. The probe runs on a fiber of its own and is not waited for once
 * the second is up (it is interrupted in the background, Db/Deadline.ts `detached`):
 * `Effect.timeout` would wait for it to stop, and a statement stuck on a database that accepts and
 * never answers takes seconds to stop — /health must say "unhealthy" at 1 s, not then.
 */
const run = (probe: Probe): Effect.Effect<Status> =>
  Effect.map(
    Effect.exit(detached(probe, TIMEOUT_MS, Effect.void, () => "timeout" as const)),
    (exit): Status => (Exit.isSuccess(exit) ? "healthy" : "unhealthy")
  )

export class Health extends Context.Service<Health, {
  readonly check: Effect.Effect<HealthReport>
}>()("Observability/Health") {
  static readonly layer = Layer.effect(Health, Effect.gen(function*() {
    const database = yield* DatabaseProbe
    const cache = yield* CacheProbe
    const ws = yield* WebSocketProbe
    // An outage of the database or Redis ends when its check passes again (docs/operations.md#outages).
    const outages = yield* Outages
    yield* outages.watch("database", database)
    yield* outages.watch("redis", cache)
    const checked = (dependency: Dependency, probe: Probe) =>
      Effect.tap(run(probe), (status) => (status === "healthy" ? outages.recovered(dependency) : Effect.void))
    const identity = yield* Effect.serviceOption(IdentityProbe)
    const check = Effect.all({
      database: checked("database", database),
      redis: checked("redis", cache),
      websocket: run(ws.check),
      active: ws.activeConnections,
      // Held keys make it healthy without asking the provider: this check ends no outage of it.
      identity: Option.match(identity, { onNone: () => Effect.succeed(undefined), onSome: (probe) => run(probe.check) })
    }, { concurrency: "unbounded" }).pipe(
      Effect.map(({ active, database, identity, redis, websocket }): HealthReport => ({
        status: [database, redis, websocket, identity].every((s) => s !== "unhealthy") ? "healthy" : "unhealthy",
        database,
        redis,
        websocket: { status: websocket, active_connections: active },
        ...(identity === undefined ? {} : { identity })
      }))
    )
    return Health.of({ check })
  }))
}
