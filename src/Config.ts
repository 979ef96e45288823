/**
 * Every setting of the service, typed, with the defaults of docs/configuration.md#settings.
 * An invalid value stops startup with a ConfigError that names the variable.
 */
import { Config, Context, Effect, Layer, Option, Redacted, Result, Schema, SchemaIssue } from "effect"
import { parseCidrList, type Cidr } from "./Domain/Cidr.ts"

export type AppEnv = "development" | "production"

/** A `host:port` of a Redis Cluster seed or of a Sentinel. */
export interface RedisNode {
  readonly host: string
  readonly port: number
}

/**
 * How the service reaches Redis (docs/configuration.md#redis-cluster-and-sentinel), chosen by
 * which one of `REDIS_URL`, `REDIS_CLUSTER_NODES` or `REDIS_SENTINELS` is set.
 */
export type RedisTopology =
  | { readonly _tag: "Single"; readonly url: Redacted.Redacted<string> }
  | { readonly _tag: "Cluster"; readonly nodes: ReadonlyArray<RedisNode> }
  | {
    readonly _tag: "Sentinel"
    readonly sentinels: ReadonlyArray<RedisNode>
    readonly master: string
    /** The Sentinels' own credentials, when they require any (their ACL is not the data nodes'). */
    readonly sentinelUsername: Option.Option<string>
    readonly sentinelPassword: Option.Option<Redacted.Redacted<string>>
  }

/** The one value App.ts chooses the Redis layers by; credentials and TLS apply to every mode. */
export interface RedisTarget {
  readonly topology: RedisTopology
  /** ACL user (REDIS_USERNAME); a `REDIS_URL` that names one wins. */
  readonly username: Option.Option<string>
  readonly password: Option.Option<Redacted.Redacted<string>>
  /** TLS to every Redis node (and to the Sentinels); `rediss://` also turns it on for `REDIS_URL`. */
  readonly tls: boolean
}

/** One Redis server at `url`, no other credentials, no TLS beyond what the URL says. */
export const singleRedis = (url: Redacted.Redacted<string> | string): RedisTarget => ({
  topology: { _tag: "Single", url: typeof url === "string" ? Redacted.make(url) : url },
  username: Option.none(),
  password: Option.none(),
  tls: false
})

/** `host:port`, the host a name, an IPv4 address or a bracketed IPv6 address (`[::1]:6379`). */
const parseNode = (text: string): RedisNode | undefined => {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]]+):(\d{1,5})$/.exec(text)
  if (match === null) return undefined
  const port = Number(match[2])
  if (port < 1 || port > 65535) return undefined
  return { host: match[1]!.replace(/^\[|\]$/g, ""), port }
}

/** A comma-separated list of `host:port` (at least one). */
export const parseRedisNodes = (raw: string): Result.Result<ReadonlyArray<RedisNode>, string> => {
  const items = raw.split(",").map((s) => s.trim()).filter((s) => s !== "")
  const nodes = items.map(parseNode).filter((n) => n !== undefined)
  return items.length > 0 && nodes.length === items.length
    ? Result.succeed(nodes)
    : Result.fail("must be a comma-separated list of host:port")
}

/** The three ways to name Redis; more than one set is a mistake the service refuses. */
const REDIS_TARGET_SETTINGS = ["REDIS_URL", "REDIS_CLUSTER_NODES", "REDIS_SENTINELS"] as const
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

/** A failure that names the variable: the message is shown as is, `at ["NAME"]` follows it. */
const invalid = (name: string, input: unknown, message: string) =>
  new Config.ConfigError(
    new Schema.SchemaError(new SchemaIssue.Pointer([name], new SchemaIssue.InvalidValue({ message }, input)))
  )

const intAtLeast = (name: string, fallback: number, min: number, message: string) =>
  Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(min, { message })), name).pipe(Config.withDefault(fallback))

const positiveInt = (name: string, fallback: number) =>
  intAtLeast(name, fallback, 1, `${name} must be a positive integer`)

const nonNegativeInt = (name: string, fallback: number) =>
  intAtLeast(name, fallback, 0, `${name} must be a non-negative integer`)

const nonEmpty = (name: string) =>
  Config.String(name).pipe(Config.option, Config.map(Option.filter((s) => s.trim() !== "")))

const nonEmptyRedacted = (name: string) =>
  Config.Redacted(name).pipe(Config.option, Config.map(Option.filter((s) => Redacted.value(s).trim() !== "")))

/** A port, or none when unset or empty. */
const optionalPort = (name: string) =>
  nonEmpty(name).pipe(
    Config.mapEffect((raw) =>
      Option.match(raw, {
        onNone: () => Effect.succeed(Option.none<number>()),
        onSome: (text) => {
          const port = Number(text.trim())
          return Number.isInteger(port) && port >= 1 && port <= 65535
            ? Effect.succeed(Option.some(port))
            : Effect.fail(invalid(name, text, `${name} must be a port number (1-65535) or empty`))
        }
      })
    )
  )

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

const fromParser = <A>(name: string, fallback: string, parse: (raw: string) => Result.Result<A, string>) =>
  Config.String(name).pipe(
    Config.withDefault(fallback),
    Config.mapEffect((raw) =>
      Result.match(parse(raw), {
        onSuccess: (a) => Effect.succeed(a),
        onFailure: (message) => Effect.fail(invalid(name, raw, `${name} ${message}`))
      })
    )
  )

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

/** A list of `host:port`, or none when unset or empty. */
const optionalNodes = (name: string) =>
  nonEmpty(name).pipe(
    Config.mapEffect((raw) =>
      Option.match(raw, {
        onNone: () => Effect.succeed(Option.none<ReadonlyArray<RedisNode>>()),
        onSome: (text) =>
          Result.match(parseRedisNodes(text), {
            onSuccess: (nodes) => Effect.succeed(Option.some(nodes)),
            onFailure: (message) => Effect.fail(invalid(name, text, `${name} ${message}`))
          })
      })
    )
  )

/**
 * REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS (docs/configuration.md#redis-cluster-and-sentinel):
 * at most one of them, with the credentials and TLS that apply to whichever it is.
 */
const redisTarget: Effect.Effect<Option.Option<RedisTarget>, Config.ConfigError> = Effect.gen(function*() {
  const url = yield* nonEmptyRedacted("REDIS_URL")
  const nodes = yield* optionalNodes("REDIS_CLUSTER_NODES")
  const sentinels = yield* optionalNodes("REDIS_SENTINELS")
  const present = [Option.isSome(url), Option.isSome(nodes), Option.isSome(sentinels)]
  const set = REDIS_TARGET_SETTINGS.filter((_, i) => present[i])
  if (set.length > 1) {
    return yield* Effect.fail(invalid(
      set[1]!,
      "<redacted>",
      `Set only one of REDIS_URL, REDIS_CLUSTER_NODES and REDIS_SENTINELS (one Redis server, a Redis Cluster, or a Sentinel group); found ${set.join(" and ")}`
    ))
  }
  const topology: Option.Option<RedisTopology> = Option.isSome(url)
    ? Option.some({ _tag: "Single", url: url.value })
    : Option.isSome(nodes)
    ? Option.some({ _tag: "Cluster", nodes: nodes.value })
    : Option.isSome(sentinels)
    ? Option.some({
      _tag: "Sentinel",
      sentinels: sentinels.value,
      master: yield* Config.String("REDIS_SENTINEL_MASTER").pipe(Config.withDefault("mymaster")),
      sentinelUsername: yield* nonEmpty("REDIS_SENTINEL_USERNAME"),
      sentinelPassword: yield* nonEmptyRedacted("REDIS_SENTINEL_PASSWORD")
    })
    : Option.none()
  const username = yield* nonEmpty("REDIS_USERNAME")
  const password = yield* nonEmptyRedacted("REDIS_PASSWORD")
  const tls = yield* Config.Boolean("REDIS_TLS").pipe(Config.withDefault(false))
  return Option.map(topology, (t): RedisTarget => ({ topology: t, username, password, tls }))
})

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
