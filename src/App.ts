/**
 * The one place where Layers are wired, and where the configuration chooses among a service's
 * implementations: every service carries its Layers as statics named `layer` (production),
 * `layerEmbedded` (PGlite, the built-in identity provider), `layerMemory` (in this process),
 * `layerRedis` and `layerNone`, and only this module picks one. `main.ts` adds the environment's
 * configuration and the Node server (opened first: it answers the probes while the rest starts);
 * tests add a test server and their own configuration (`App.layer`).
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Effect, Layer, Option, References } from "effect"
import { join } from "node:path"
import { HttpMiddleware, HttpRouter, HttpServer, type HttpServerRequest, type HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { Api, CommonResponses } from "./Api.ts"
import * as AuditLogsHttp from "./AuditLogs/Http.ts"
import { AuditRepo } from "./AuditLogs/Repo.ts"
import { AuditLog } from "./AuditLogs/AuditLog.ts"
import { AuditRetention } from "./AuditLogs/Retention.ts"
import * as BearerAuth from "./Auth/Authentication.ts"
import * as LoginHttp from "./Auth/Http.ts"
import { IdentityProvider } from "./Auth/IdentityProvider.ts"
import { Login } from "./Auth/Login.ts"
import { Authors } from "./Authors/Authors.ts"
import * as AuthorsHttp from "./Authors/Http.ts"
import { AuthorRepo } from "./Authors/Repo.ts"
import { ReadCache } from "./Authors/ReadCache.ts"
import { AppConfig, modeLine } from "./Config.ts"
import type { RedisNode, RedisTarget } from "./Config/Redis.ts"
import { Database } from "./Db/Database.ts"
import * as Docs from "./Http/Docs.ts"
import * as FrontDoor from "./Http/FrontDoor.ts"
import type { Upgrades } from "./Edge/Upgrades.ts"
import type { NodeServer } from "./Http/NodeServer.ts"
import { CacheProbe, DatabaseProbe, Health } from "./Observability/Health.ts"
import * as SystemHttp from "./Observability/Http.ts"
import { setAppInfo } from "./Observability/Metrics.ts"
import { layerOutages } from "./Observability/Outages.ts"
import { layerTracing } from "./Observability/Tracing.ts"
import * as ProfilingHttp from "./Profiling/Http.ts"
import { Profiler } from "./Profiling/Profiler.ts"
import { RateLimiter } from "./RateLimit/RateLimiter.ts"
import { RedisClient } from "./Store/Redis.ts"
import * as WsHttp from "./Ws/Http.ts"
import { ConnectionRegistry, layerAuthorEvents, layerWebSocketProbe } from "./Ws/Registry.ts"
import { untilDatabaseReachable } from "./Startup.ts"
import { PackageHandlers } from "./Ws/Packages.ts"
import * as WsServer from "./Ws/Server.ts"

/** The HttpApi with its handlers; the middlewares it declares (authentication, common responses). */
const layerApi = HttpApiBuilder.layer(Api, { openapiPath: "/openapi.json" }).pipe(
  Layer.provide([AuthorsHttp.layer, AuditLogsHttp.layer, LoginHttp.layer, SystemHttp.layer, ProfilingHttp.layer]),
  Layer.provide([BearerAuth.layer, CommonResponses.layer])
)

/**
 * Every route on the one router, behind the front door (a global router middleware), which answers
 * the author reads the read cache holds itself (the authors' stage: docs/architecture.md#the-request-path).
 */
const layerRoutes = Layer.mergeAll(layerApi, Docs.layer, WsHttp.layer, FrontDoor.layer(Api, { early: [AuthorsHttp.early] })).pipe(
  Layer.provide(NodeHttpServer.layerHttpServices)
)

/**
 * The shared stores: Redis when configured — one server, a Redis Cluster or a Sentinel group
 * (`RedisTarget`, Config/Redis.ts) — so several instances share one budget, one connection registry,
 * one audit stream; else in-process stand-ins for a single instance. Author changes are broadcast
 * through the registry; its store is the WebSocket health check.
 */
const layerStores = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  return Option.match(config.redis, {
    onNone: () => Layer.mergeAll(RateLimiter.layerMemory, CacheProbe.layerMemory, ConnectionRegistry.layerMemory),
    onSome: (target) =>
      Layer.mergeAll(RateLimiter.layerRedis, CacheProbe.layerRedis, ConnectionRegistry.layerRedis).pipe(
        Layer.provideMerge(RedisClient.layer(target, config.redisKeyPrefix))
      )
  })
}))

/**
 * The database: the server at DATABASE_URL, else embedded PostgreSQL (PGlite) in DATA_DIR — the
 * same driver, SQL and migrations either way. `npm run migrate` uses it too.
 */
export const layerDatabase = Layer.unwrap(Effect.map(AppConfig, (config) => {
  const options = { statementTimeoutMs: config.databaseStatementTimeoutSeconds * 1000 }
  return Option.match(config.databaseUrl, {
    onSome: (url) => Database.layer(url, config.databasePoolMax, { ...options, prepare: config.databasePreparedStatements }),
    onNone: () => Database.layerEmbedded(join(config.dataDir, "pgdata"), config.databasePoolMax, options)
  })
}))

/** The identity provider: OIDC when OIDC_ISSUER_URL is set, else the built-in development provider. */
const layerIdentity = Layer.unwrap(Effect.map(AppConfig, (config) =>
  Option.isSome(config.oidcIssuerUrl) ? IdentityProvider.layer : IdentityProvider.layerEmbedded
))

/**
 * External systems, or their embedded stand-ins, as the configuration says. A database that
 * cannot be reached yet is waited for, up to STARTUP_TIMEOUT_SECONDS (Startup.ts).
 */
const layerInfrastructure = Layer.mergeAll(
  untilDatabaseReachable(layerDatabase),
  layerIdentity,
  Layer.mergeAll(layerAuthorEvents, layerWebSocketProbe).pipe(Layer.provideMerge(layerStores))
)

/**
 * The read cache of author reads: its generations in Redis when configured (shared by every
 * instance, read by the rate check; in every mode), else in this process. The HTTP front door and
 * the WebSocket dispatch use it too.
 */
const layerReadCache = Layer.unwrap(Effect.map(Effect.serviceOption(RedisClient), (redis) =>
  Option.isSome(redis) ? ReadCache.layerRedis.pipe(Layer.provide(Layer.succeed(RedisClient, redis.value))) : ReadCache.layerMemory
))

/**
 * The audit writer (docs/audit.md#guarantees): none when AUDIT_LOG_ENABLED=false, through the Redis
 * journal when Redis is configured (in every mode: its keys are sharded by hash tag), else buffered
 * in this process. It sits here because it needs `SqlClient` (and Redis, when configured) from below.
 */
const layerAuditLog = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  if (!config.auditLogEnabled) return AuditLog.layerNone
  const redis = yield* Effect.serviceOption(RedisClient)
  return Option.isSome(redis)
    ? AuditLog.layerRedis.pipe(Layer.provide(Layer.succeed(RedisClient, redis.value)))
    : AuditLog.layer
}))

/** The audit retention (docs/audit.md#retention): a pruning fiber when AUDIT_RETENTION_DAYS > 0, else nothing. */
const layerAuditRetention = Layer.unwrap(Effect.map(AppConfig, (config) =>
  config.auditRetentionDays > 0 ? AuditRetention.layer : Layer.empty
))

const layerServices = Layer.mergeAll(
  Authors.layer.pipe(Layer.provide(AuthorRepo.layer)),
  Login.layer,
  AuditRepo.layer,
  layerAuditRetention,
  Health.layer.pipe(Layer.provide(DatabaseProbe.layer)),
  Profiler.layer
).pipe(
  Layer.provideMerge(layerAuditLog),
  Layer.provideMerge(layerReadCache),
  Layer.provideMerge(layerInfrastructure)
)

/** The startup line naming the Redis the service uses (never a password). */
const describeRedis = (target: RedisTarget): string => {
  const topology = target.topology
  const nodes = (list: ReadonlyArray<RedisNode>) => list.map((n) => `${n.host}:${n.port}`).join(", ")
  switch (topology._tag) {
    case "Single":
      return `Redis: one server${target.tls ? " (TLS)" : ""}`
    case "Sentinel":
      return `Redis: the primary of Sentinel group "${topology.master}" (Sentinels ${nodes(topology.sentinels)})${target.tls ? ", TLS" : ""}`
    case "Cluster":
      return `Redis: a Redis Cluster (seeds ${nodes(topology.nodes)})${target.tls ? ", TLS" : ""}`
  }
}

const layerStartupLog = Layer.effectDiscard(Effect.gen(function*() {
  const config = yield* AppConfig
  setAppInfo(config.appEnv)
  // docs/configuration.md#the-mode: which rules apply, and why.
  const mode = modeLine(config)
  yield* mode.warn ? Effect.logWarning(mode.text) : Effect.logInfo(mode.text)
  const embedded = [
    Option.isNone(config.databaseUrl) ? `database (PGlite in ${config.dataDir})` : undefined,
    Option.isNone(config.redis) ? "cache store (in-process)" : undefined,
    Option.isNone(config.oidcIssuerUrl) ? `identity provider (built-in, users from ${config.authUsersFile})` : undefined
  ].filter((x) => x !== undefined)
  yield* Effect.logInfo(embedded.length > 0 ? `Embedded: ${embedded.join(", ")}` : "Embedded: none")
  // Production refuses an embedded database (Config.ts); in-process stores it allows, but says what they mean.
  if (Option.isSome(config.redis)) yield* Effect.logInfo(describeRedis(config.redis.value))
  if (config.appEnv === "production" && Option.isNone(config.redis)) {
    yield* Effect.logWarning(
      "REDIS_URL is not set (nor REDIS_CLUSTER_NODES or REDIS_SENTINELS): rate limits, WebSocket connection counts, broadcasts " +
        "and session expiry are per instance (in-process stores), and the read cache learns of another instance's writes from " +
        "PostgreSQL within a second, not before their response; with more than one instance, set one of them"
    )
  }
}))

/** HTTP server spans are named by route template (`GET /authors/{author_id}`), never the raw path. */
const layerSpanNames = Layer.succeed(HttpMiddleware.SpanNameGenerator, (() => {
  const labelOf = FrontDoor.routeLabeler(Api)
  return (request: HttpServerRequest.HttpServerRequest) => `${request.method} ${labelOf(request.method, request.url)}`
})())

/**
 * Serves the routes and the `/web` WebSocket. A path parameter may be longer than the router's
 * default 100 characters, so a long report name or author id reaches its schema and gets its 400 /
 * 422 instead of a 404; the line itself stays bounded by Node's 16 KiB header limit.
 */
const routes = HttpRouter.toHttpEffect(layerRoutes).pipe(Effect.provideService(HttpRouter.RouterConfig, { maxParamLength: 4096 }))

/**
 * A server middleware, even one that does nothing, makes the platform open each request's server
 * span (continuing an incoming `traceparent`); it is there only when the tracer is enabled (an
 * exporter is configured, Observability/Tracing.ts), so with tracing off a request pays for no span.
 */
const withServerSpan = HttpMiddleware.make((app) => app)

/** Attaches the handler (the port is already open) and the `/web` server; "Listening on" says the service is ready. */
const serving = <E, R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  HttpServer.withLogAddress(Layer.mergeAll(
    Layer.unwrap(Effect.map(Effect.service(References.TracerEnabled), (traced) => traced ? HttpServer.serve(handler, withServerSpan) : HttpServer.serve(handler))),
    WsServer.layer.pipe(Layer.provide(PackageHandlers.layer))
  ))

/** The routes, built once every service is up, then served. */
const layerServed = Layer.unwrap(Effect.map(routes, serving))

/** Logs the open port: until "Listening on", probes answer and every other request gets 503 `Service starting`. */
const layerPortOpenLog = Layer.effectDiscard(HttpServer.addressFormattedWith((address) =>
  Effect.logInfo(`Port open on ${address}: starting (/livez 200, /readyz and /health 503, other requests 503 until ready)`)
))

/**
 * The whole service — the HttpApi and the `/web` WebSocket on one port — on `server` (e.g.
 * `NodeServer.layer`, Http/NodeServer.ts), which it opens first: a request during start-up gets
 * the Node server's starting answer (docs/operations.md#starting) — probes included, for as long as
 * the database takes — until every service is up, the routes are built and the handler is
 * attached. Its services (`NodeServer`, `Upgrades`, `HttpServer`) are outputs. Needs the
 * `AppConfig`. `tracing` is provided under everything else (server, SQL, Redis), so every span
 * goes to it (Observability/Tracing.ts); so is the outage tracker, which every place that sees a
 * dependency fail reports to (Observability/Outages.ts).
 */
export const layer = <S, E>(
  server: Layer.Layer<S | NodeServer | Upgrades | HttpServer.HttpServer, E, AppConfig>,
  tracing: Layer.Layer<never, never, AppConfig> = layerTracing
) =>
  layerServed.pipe(
    Layer.provide(layerSpanNames),
    Layer.provide(layerServices),
    Layer.provide(layerStartupLog),
    Layer.provideMerge(Layer.provideMerge(layerPortOpenLog, server)),
    Layer.provide(layerOutages),
    Layer.provide(tracing)
  )
