/**
 * Every setting of the service, typed, with the defaults of docs/configuration.md#settings, and the
 * production rules (docs/configuration.md#production-rules). An invalid value stops startup with a
 * ConfigError that names the variable. Where Redis is (REDIS_URL, a Cluster or a Sentinel group) is
 * read by Config/Redis.ts; the readers every setting shares, and their refusals, are Config/Read.ts.
 */
import { Config, Context, Effect, Layer, Option, Redacted, Result, Schema } from "effect"
import { fromParser, invalid, nonEmpty, nonEmptyRedacted, nonNegativeInt, optionalPort, positiveInt } from "./Config/Read.ts"
import { type RedisTarget, redisTarget } from "./Config/Redis.ts"
import { parseCidrList, type Cidr } from "./Domain/Cidr.ts"

export type AppEnv = "development" | "production"

/** What decided the mode (docs/configuration.md#the-mode): `APP_ENV`, `NODE_ENV=production` with `APP_ENV` unset, or neither. */
export type AppEnvSource = "APP_ENV" | "NODE_ENV" | "default"

/**
 * The mode from the two variables (docs/configuration.md#the-mode): `APP_ENV` when set; else
 * production when `NODE_ENV=production` (the Node convention platforms set); else development.
 */
export const appEnvOf = (appEnv: string | undefined, nodeEnv: string | undefined): { readonly appEnv: AppEnv; readonly source: AppEnvSource } =>
  appEnv === "production" || appEnv === "development"
    ? { appEnv, source: "APP_ENV" }
    : nodeEnv?.trim() === "production"
    ? { appEnv: "production", source: "NODE_ENV" }
    : { appEnv: "development", source: "default" }

export interface AppConfigShape {
  readonly port: number
  readonly host: string
  /**
   * `ADMIN_PORT`: when set, `/metrics` and `/api/profiling/*` are served on this port only (bound
   * on `host` too) and `port` answers them 404; unset, they are served on `port`.
   */
  readonly adminPort: Option.Option<number>
  /** How long start-up keeps retrying a database it cannot reach before it gives up (exit 1). */
  readonly startupTimeoutSeconds: number
  readonly appEnv: AppEnv
  /** Which variable decided `appEnv`, and `NODE_ENV` as set: the startup log says why the mode is what it is. */
  readonly appEnvSource: AppEnvSource
  readonly nodeEnv: Option.Option<string>
  readonly logLevel: "trace" | "debug" | "info" | "warning" | "error" | "fatal" | "none"
  readonly logFormat: "json" | "pretty"
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly databasePoolMax: number
  /** Parameterised statements as named prepared statements (DATABASE_URL only; never on embedded PGlite). */
  readonly databasePreparedStatements: boolean
  /** The longest a statement may wait for a connection and run; then the request gets the database error. */
  readonly databaseStatementTimeoutSeconds: number
  readonly dataDir: string
  /** Where the shared stores live: one Redis server, a Redis Cluster or a Sentinel group; none → in-process stores. */
  readonly redis: Option.Option<RedisTarget>
  readonly redisKeyPrefix: string
  /** docs/configuration.md#production-rules: `https://` with `APP_ENV=production` (unless `oidcAllowHttpIssuer`). */
  readonly oidcIssuerUrl: Option.Option<string>
  /**
   * Accept an `http://` issuer with `APP_ENV=production` — its keys then come
   * over plain HTTP, so only on a network the operator vouches for (a compose network).
   */
  readonly oidcAllowHttpIssuer: boolean
  readonly oidcClientId: string
  readonly oidcClientSecret: Option.Option<Redacted.Redacted<string>>
  /** `OIDC_AUDIENCE` as set (`none` included); what is checked is `tokenAudience` below. */
  readonly oidcAudience: Option.Option<string>
  readonly authUsersFile: string
  readonly rateLimitEnabled: boolean
  readonly rateLimitPerMinute: number
  readonly rateLimitBurst: number
  readonly rateLimitFailMode: "open" | "closed"
  /** Failures per username (docs/errors-and-limits.md#failed-logins) in the window before logins are refused; 0 = off. */
  readonly loginMaxFailures: number
  readonly loginFailureWindowSeconds: number
  readonly trustedProxies: ReadonlyArray<Cidr>
  readonly wsMaxConnectionsPerUser: number
  /** WebSocket connections one instance holds at most (handshakes included); more are refused 503. */
  readonly wsMaxConnections: number
  readonly wsMessageRateLimit: number
  readonly wsAuthTimeoutSeconds: number
  /** How long a connection outlives its token's exp (docs/websocket.md#sessions; default 10 s). */
  readonly wsSessionGraceSeconds: number
  /** How long a crashed instance's connection slots stay counted (Redis). */
  readonly wsSlotTtlSeconds: number
  readonly allowedWsOrigins: ReadonlyArray<string>
  /** docs/http-api.md#conventions (CORS): browser origins answered with CORS headers (`*` = any); empty = none. */
  readonly corsAllowedOrigins: ReadonlyArray<string>
  readonly maxRequestBodyBytes: number
  readonly wsMaxMessageBytes: number
  readonly auditLogEnabled: boolean
  /** Audit records older than this many days are deleted (docs/audit.md#retention); 0 keeps them forever. */
  readonly auditRetentionDays: number
  readonly profilingEnabled: boolean
  readonly profilingOutputDir: string
  readonly profilingIntervalSeconds: number
  readonly otelExporterOtlpEndpoint: Option.Option<string>
  /** The OpenTelemetry specification's signal-specific URL, used as is; it wins over `<endpoint>/v1/traces`. */
  readonly otelExporterOtlpTracesEndpoint: Option.Option<string>
  readonly otelServiceName: string
  /** The read cache's bound in bytes (Authors/ReadCache.ts); 0 switches it off. */
  readonly readCacheMaxBytes: number
  /** The oldest answer the read cache serves, in seconds (docs/architecture.md#the-read-cache); 0: no limit. */
  readonly readCacheMaxAgeSeconds: number
}

/**
 * Why the production rules apply, as the refusals say it: `APP_ENV=production`, or `NODE_ENV` with
 * `APP_ENV` unset.
 */
export const productionBecause = (mode: Pick<AppConfigShape, "appEnvSource">): string =>
  mode.appEnvSource === "NODE_ENV" ? "NODE_ENV=production and APP_ENV is unset" : "APP_ENV=production"

/**
 * Why `DATABASE_URL` cannot be used, if it cannot: it must be a `postgres://` URL, and production
 * needs one — without it the data would live in the embedded database on the instance's own disk
 * (a pod's, lost at its next reschedule). The message never repeats the URL (it holds a password).
 */
export const databaseUrlProblem = (
  url: Option.Option<Redacted.Redacted<string>>,
  mode: Pick<AppConfigShape, "appEnv" | "appEnvSource">
): string | undefined => {
  if (Option.isNone(url)) {
    return mode.appEnv === "production"
      ? `DATABASE_URL must be set when ${productionBecause(mode)}: without it the data would live in the embedded ` +
        "database on this instance's own disk (a pod's disk is lost when it is rescheduled)"
      : undefined
  }
  let protocol: string
  try {
    protocol = new URL(Redacted.value(url.value)).protocol
  } catch {
    return "DATABASE_URL must be a postgres:// URL"
  }
  return protocol === "postgres:" || protocol === "postgresql:" ? undefined : "DATABASE_URL must be a postgres:// URL"
}

/** `ALLOWED_WS_ORIGINS`, `CORS_ALLOWED_ORIGINS`: comma-separated or a JSON array of strings. */
export const parseOriginList = (raw: string): Result.Result<ReadonlyArray<string>, string> => {
  const text = raw.trim()
  if (text.startsWith("[")) {
    try {
      const parsed: unknown = JSON.parse(text)
      if (Array.isArray(parsed) && parsed.every((x): x is string => typeof x === "string")) {
        return Result.succeed(parsed.map((s) => s.trim()).filter((s) => s !== ""))
      }
    } catch {
      // fall through to the error below
    }
    return Result.fail("must be a JSON array of strings or a comma-separated list")
  }
  return Result.succeed(text.split(",").map((s) => s.trim()).filter((s) => s !== ""))
}

/**
 * Why `OIDC_ISSUER_URL` cannot be used, if it cannot: it must be an http(s) URL, and `https://`
 * in production — the keys that verify every token are fetched from it, and over plain HTTP
 * anyone on the path could hand the service keys of their own (docs/configuration.md#production-rules).
 */
export const issuerUrlProblem = (url: string, mode: Pick<AppConfigShape, "appEnv" | "appEnvSource">, allowHttp: boolean): string | undefined => {
  let protocol: string
  try {
    protocol = new URL(url).protocol
  } catch {
    return "OIDC_ISSUER_URL must be an absolute https:// URL"
  }
  if (protocol !== "https:" && protocol !== "http:") return "OIDC_ISSUER_URL must be an absolute https:// URL"
  if (protocol === "http:" && mode.appEnv === "production" && !allowHttp) {
    return `OIDC_ISSUER_URL must be an https:// URL when ${productionBecause(mode)} ` +
      "(set OIDC_ALLOW_HTTP_ISSUER=true only where the network to the provider is trusted)"
  }
  return undefined
}

/** `LOG_LEVEL` accepts `warn` as well as `warning`; the shape keeps one spelling. */
const LogLevelSetting = Schema.Literals(["trace", "debug", "info", "warn", "warning", "error", "fatal", "none"])

/**
 * The startup log's first word on the mode (docs/configuration.md#the-mode), and whether it is a
 * warning: `APP_ENV=development` overriding `NODE_ENV=production` is said loudly, since the
 * platform asked for production.
 */
export const modeLine = (config: Pick<AppConfigShape, "appEnv" | "appEnvSource" | "nodeEnv">): { readonly text: string; readonly warn: boolean } => {
  const nodeEnv = Option.getOrUndefined(Option.map(config.nodeEnv, (v) => v.trim()))
  switch (config.appEnvSource) {
    case "NODE_ENV":
      return { text: "Mode: production (NODE_ENV=production, APP_ENV unset)", warn: false }
    case "default":
      return { text: `Mode: development (APP_ENV unset, ${nodeEnv === undefined ? "NODE_ENV unset" : `NODE_ENV=${nodeEnv}`})`, warn: false }
    case "APP_ENV":
      return config.appEnv === "development" && nodeEnv === "production"
        ? {
          text: "Mode: development (APP_ENV=development wins over NODE_ENV=production): the production rules do not apply " +
            "(embedded database and built-in identity provider allowed, profiling on by default)",
          warn: true
        }
        : { text: `Mode: ${config.appEnv} (APP_ENV=${config.appEnv})`, warn: false }
  }
}

export const appConfig: Effect.Effect<AppConfigShape, Config.ConfigError> = Effect.gen(function*() {
  const nodeEnv = yield* nonEmpty("NODE_ENV")
  const explicit = yield* Config.Literals(["development", "production"], "APP_ENV").pipe(Config.option)
  const mode = appEnvOf(Option.getOrUndefined(explicit), Option.getOrUndefined(nodeEnv))
  const appEnv = mode.appEnv
  const oidcAllowHttpIssuer = yield* Config.Boolean("OIDC_ALLOW_HTTP_ISSUER").pipe(Config.withDefault(false))
  const oidcIssuerUrl = yield* nonEmpty("OIDC_ISSUER_URL").pipe(Config.map(Option.map((u) => u.trim().replace(/\/+$/, ""))))
  if (Option.isSome(oidcIssuerUrl)) {
    const problem = issuerUrlProblem(oidcIssuerUrl.value, { appEnv, appEnvSource: mode.source }, oidcAllowHttpIssuer)
    if (problem !== undefined) return yield* Effect.fail(invalid("OIDC_ISSUER_URL", oidcIssuerUrl.value, problem))
  }
  const databaseUrl = yield* nonEmptyRedacted("DATABASE_URL")
  const databaseProblem = databaseUrlProblem(databaseUrl, { appEnv, appEnvSource: mode.source })
  if (databaseProblem !== undefined) return yield* Effect.fail(invalid("DATABASE_URL", "<redacted>", databaseProblem))
  const port = yield* Config.Port("PORT").pipe(Config.withDefault(8000))
  const adminPort = yield* optionalPort("ADMIN_PORT")
  if (Option.isSome(adminPort) && adminPort.value === port) {
    return yield* Effect.fail(invalid("ADMIN_PORT", String(adminPort.value), "ADMIN_PORT must differ from PORT (or be empty to serve everything on PORT)"))
  }
  const redis = yield* redisTarget
  return {
    port,
    host: yield* Config.String("HOST").pipe(Config.withDefault("0.0.0.0")),
    adminPort,
    startupTimeoutSeconds: yield* positiveInt("STARTUP_TIMEOUT_SECONDS", 60),
    appEnv,
    appEnvSource: mode.source,
    nodeEnv,
    logLevel: yield* Config.schema(LogLevelSetting, "LOG_LEVEL").pipe(
      Config.withDefault("info"),
      Config.map((level) => (level === "warn" ? "warning" : level))
    ),
    logFormat: yield* Config.Literals(["json", "pretty"], "LOG_FORMAT").pipe(
      Config.withDefault(appEnv === "production" ? "json" : "pretty")
    ),
    databaseUrl,
    databasePoolMax: yield* positiveInt("DATABASE_POOL_MAX", 10),
    databasePreparedStatements: yield* Config.Boolean("DATABASE_PREPARED_STATEMENTS").pipe(Config.withDefault(true)),
    databaseStatementTimeoutSeconds: yield* positiveInt("DATABASE_STATEMENT_TIMEOUT_SECONDS", 5),
    dataDir: yield* Config.String("DATA_DIR").pipe(Config.withDefault("./.data")),
    redis,
    redisKeyPrefix: yield* Config.String("REDIS_KEY_PREFIX").pipe(Config.withDefault("authors:")),
    oidcIssuerUrl,
    oidcAllowHttpIssuer,
    oidcClientId: yield* Config.String("OIDC_CLIENT_ID").pipe(Config.withDefault("author-directory")),
    oidcClientSecret: yield* nonEmptyRedacted("OIDC_CLIENT_SECRET"),
    oidcAudience: yield* nonEmpty("OIDC_AUDIENCE"),
    authUsersFile: yield* Config.String("AUTH_USERS_FILE").pipe(Config.withDefault("config/dev-users.json")),
    rateLimitEnabled: yield* Config.Boolean("RATE_LIMIT_ENABLED").pipe(Config.withDefault(true)),
    rateLimitPerMinute: yield* positiveInt("RATE_LIMIT_PER_MINUTE", 60),
    rateLimitBurst: yield* nonNegativeInt("RATE_LIMIT_BURST", 10),
    rateLimitFailMode: yield* Config.Literals(["open", "closed"], "RATE_LIMIT_FAIL_MODE").pipe(Config.withDefault("open")),
    loginMaxFailures: yield* nonNegativeInt("LOGIN_MAX_FAILURES", 10),
    loginFailureWindowSeconds: yield* positiveInt("LOGIN_FAILURE_WINDOW_SECONDS", 900),
    trustedProxies: yield* fromParser("TRUSTED_PROXIES", "", parseCidrList),
    wsMaxConnectionsPerUser: yield* positiveInt("WS_MAX_CONNECTIONS_PER_USER", 5),
    wsMaxConnections: yield* positiveInt("WS_MAX_CONNECTIONS", 10_000),
    wsMessageRateLimit: yield* positiveInt("WS_MESSAGE_RATE_LIMIT", 100),
    wsAuthTimeoutSeconds: yield* positiveInt("WS_AUTH_TIMEOUT_SECONDS", 5),
    wsSessionGraceSeconds: yield* nonNegativeInt("WS_SESSION_GRACE_SECONDS", 10),
    wsSlotTtlSeconds: yield* positiveInt("WS_SLOT_TTL_SECONDS", 30),
    allowedWsOrigins: yield* fromParser("ALLOWED_WS_ORIGINS", "*", parseOriginList),
    corsAllowedOrigins: yield* fromParser("CORS_ALLOWED_ORIGINS", "", parseOriginList),
    maxRequestBodyBytes: yield* positiveInt("MAX_REQUEST_BODY_BYTES", 1_048_576),
    wsMaxMessageBytes: yield* positiveInt("WS_MAX_MESSAGE_BYTES", 65_536),
    auditLogEnabled: yield* Config.Boolean("AUDIT_LOG_ENABLED").pipe(Config.withDefault(true)),
    auditRetentionDays: yield* nonNegativeInt("AUDIT_RETENTION_DAYS", 0),
    profilingEnabled: yield* Config.Boolean("PROFILING_ENABLED").pipe(Config.withDefault(appEnv !== "production")),
    profilingOutputDir: yield* Config.String("PROFILING_OUTPUT_DIR").pipe(Config.withDefault("profiling_reports")),
    profilingIntervalSeconds: yield* positiveInt("PROFILING_INTERVAL_SECONDS", 30),
    otelExporterOtlpEndpoint: yield* nonEmpty("OTEL_EXPORTER_OTLP_ENDPOINT"),
    otelExporterOtlpTracesEndpoint: yield* nonEmpty("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    otelServiceName: yield* Config.String("OTEL_SERVICE_NAME").pipe(Config.withDefault("author-directory-service")),
    readCacheMaxBytes: yield* nonNegativeInt("READ_CACHE_MAX_BYTES", 33_554_432),
    readCacheMaxAgeSeconds: yield* nonNegativeInt("READ_CACHE_MAX_AGE_SECONDS", 60)
  } satisfies AppConfigShape
})

/**
 * The audience access tokens must carry (docs/deployment.md#identity-provider): `OIDC_AUDIENCE`; unset, `OIDC_CLIENT_ID`
 * in production and no check in development; `none` (any case) switches the check off.
 */
export const tokenAudience = (
  config: Pick<AppConfigShape, "appEnv" | "oidcAudience" | "oidcClientId">
): string | undefined =>
  Option.match(Option.map(config.oidcAudience, (a) => a.trim()), {
    onNone: () => (config.appEnv === "production" ? config.oidcClientId : undefined),
    onSome: (audience) => (audience.toLowerCase() === "none" ? undefined : audience)
  })

export class AppConfig extends Context.Service<AppConfig, AppConfigShape>()("App/Config") {
  /** Reads the environment (or the current ConfigProvider). */
  static readonly layer = Layer.effect(AppConfig, appConfig)
  /** For tests: the defaults with some values replaced (an `appEnv` given is as if APP_ENV said it). */
  static readonly layerTest = (overrides: Partial<AppConfigShape>) =>
    Layer.effect(
      AppConfig,
      Effect.map(appConfig, (c) => ({ ...c, ...(overrides.appEnv === undefined ? {} : { appEnvSource: "APP_ENV" as const }), ...overrides }))
    )
}
