/**
 * The one place where Layers are wired. `main.ts` adds the Node server and the environment's
 * configuration; tests add a test server and their own configuration.
 */
import { HttpApi, HttpApiBuilder, HttpMiddleware, HttpServer, type HttpServerRequest } from "@effect/platform"
import { Context, Effect, Layer, Option } from "effect"
import { Api } from "./Api.ts"
import { AuditLogsHttpLive } from "./AuditLogs/Http.ts"
import { AuditRepo } from "./AuditLogs/Repo.ts"
import { AuditLogLive } from "./AuditLogs/Writer.ts"
import { Authentication, AuthenticationLive, RequiredRoles } from "./Auth/Authentication.ts"
import { LoginHttpLive } from "./Auth/Http.ts"
import { AuthLive } from "./Auth/Layers.ts"
import { Authors } from "./Authors/Authors.ts"
import { AuthorsHttpLive } from "./Authors/Http.ts"
import { AppConfig } from "./Config.ts"
import { DatabaseLive } from "./Db/Database.ts"
import type { Role } from "./Domain/User.ts"
import { DocsLive } from "./Http/Docs.ts"
import { FrontDoorLive, routeLabeler } from "./Http/FrontDoor.ts"
import { CacheProbe, DatabaseProbe, Health } from "./Observability/Health.ts"
import { SystemHttpLive } from "./Observability/Http.ts"
import { setAppInfo } from "./Observability/Metrics.ts"
import { TracingLive } from "./Observability/Tracing.ts"
import { ProfilingHttpLive } from "./Profiling/Http.ts"
import { Profiler } from "./Profiling/Profiler.ts"
import { MemoryRateLimiterLive } from "./RateLimit/RateLimiter.ts"
import { RedisRateLimiterLive } from "./RateLimit/RedisRateLimiter.ts"
import { redisLayer, RedisProbe } from "./Store/Redis.ts"
import { WsHttpLive } from "./Ws/Http.ts"
import { RedisRegistryLive } from "./Ws/RedisRegistry.ts"
import { AuthorEventsLive, MemoryRegistryLive, WebSocketProbeLive } from "./Ws/Registry.ts"
import { WsServerLive } from "./Ws/Server.ts"

/** "METHOD /path/:param" → the roles its `RequiredRoles` annotation lists. */
const rolesByRoute = () => {
  const table = new Map<string, ReadonlyArray<Role>>()
  HttpApi.reflect(Api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint, mergedAnnotations }) => {
      Option.map(Context.getOption(mergedAnnotations, RequiredRoles), (roles) => table.set(`${endpoint.method} ${endpoint.path}`, roles))
    }
  })
  return table
}

const AuthenticationLayer = Layer.effect(Authentication, AuthenticationLive(rolesByRoute()))

const ApiLive = HttpApiBuilder.api(Api).pipe(
  Layer.provide([AuthorsHttpLive, AuditLogsHttpLive, LoginHttpLive, SystemHttpLive, ProfilingHttpLive]),
  Layer.provide(AuthenticationLayer)
)

/**
 * The shared stores: Redis when `REDIS_URL` is set (several instances share one budget, one
 * connection registry, one audit stream), else in-process stand-ins for a single instance.
 * Author changes are broadcast through the registry; its store is the WebSocket health check.
 */
const StoresLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
  Option.match(config.redisUrl, {
    onNone: () => Layer.mergeAll(MemoryRateLimiterLive, CacheProbe.InProcess, MemoryRegistryLive),
    onSome: (url) =>
      Layer.mergeAll(RedisRateLimiterLive, RedisProbe, RedisRegistryLive).pipe(
        Layer.provideMerge(redisLayer(url, config.redisKeyPrefix))
      )
  })
))

/** External systems, or their embedded stand-ins, as the configuration says. */
const InfrastructureLive = Layer.mergeAll(
  DatabaseLive,
  AuthLive,
  Layer.mergeAll(AuthorEventsLive, WebSocketProbeLive).pipe(Layer.provideMerge(StoresLive))
)

/** The audit writer sits here because it needs `SqlClient` (and Redis, when configured) from below. */
const ServicesLive = Layer.mergeAll(
  Authors.Default,
  AuditRepo.Default,
  AuditLogLive,
  Health.Default.pipe(Layer.provide(DatabaseProbe.Live)),
  Profiler.Default
).pipe(
  Layer.provideMerge(InfrastructureLive)
)

const StartupLog = Layer.effectDiscard(Effect.gen(function*() {
  const config = yield* AppConfig
  setAppInfo(config.appEnv)
  const embedded = [
    Option.isNone(config.databaseUrl) ? `database (PGlite in ${config.dataDir})` : undefined,
    Option.isNone(config.redisUrl) ? "cache store (in-process)" : undefined,
    Option.isNone(config.oidcIssuerUrl) ? `identity provider (built-in, users from ${config.authUsersFile})` : undefined
  ].filter((x) => x !== undefined)
  yield* Effect.logInfo(embedded.length > 0 ? `Embedded: ${embedded.join(", ")}` : "Embedded: none")
}))

/** HTTP server spans are named by route template (`GET /authors/{author_id}`), never the raw path. */
const spanName = (() => {
  const labelOf = routeLabeler(Api)
  return (request: HttpServerRequest.HttpServerRequest) => {
    const query = request.url.indexOf("?")
    return `${request.method} ${labelOf(request.method, query === -1 ? request.url : request.url.slice(0, query))}`
  }
})()

/**
 * The whole service — the HttpApi and the `/web` WebSocket on one port; needs the Node server
 * (`NodeServer` and its `HttpServer`) and the `AppConfig`. `tracing` is provided under
 * everything else (server, SQL, Redis), so every span goes to it (Observability/Tracing.ts).
 */
export const makeAppLive = (tracing: Layer.Layer<never, never, AppConfig> = TracingLive) =>
  Layer.merge(
    HttpApiBuilder.serve().pipe(
      Layer.provide(DocsLive),
      Layer.provide(WsHttpLive),
      Layer.provide(FrontDoorLive(Api)),
      Layer.provide(ApiLive)
    ),
    WsServerLive
  ).pipe(
    Layer.provide(ServicesLive),
    Layer.provide(StartupLog),
    HttpServer.withLogAddress,
    HttpMiddleware.withSpanNameGenerator(spanName),
    Layer.provide(tracing)
  )

export const AppLive = makeAppLive()
