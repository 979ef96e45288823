/**
 * Every setting of the service, typed, with the defaults of docs/configuration.md#settings.
 * An invalid value stops startup with a ConfigError that names the variable.
 */
import { Config, Context, Effect, Layer, Option, Redacted, Result, Schema, SchemaIssue } from "effect"
import { parseCidrList, type Cidr } from "./Domain/Cidr.ts"

export type AppEnv = "development" | "production"

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
  readonly logLevel: "trace" | "debug" | "info" | "warning" | "error" | "fatal" | "none"
  readonly logFormat: "json" | "pretty"
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly databasePoolMax: number
  /** Parameterised statements as named prepared statements (DATABASE_URL only; never on embedded PGlite). */
  readonly databasePreparedStatements: boolean
  /** The longest a statement may wait for a connection and run; then the request gets the database error. */
  readonly databaseStatementTimeoutSeconds: number
  readonly dataDir: string
  readonly redisUrl: Option.Option<Redacted.Redacted<string>>
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
 * Why `DATABASE_URL` cannot be used, if it cannot: it must be a `postgres://` URL, and production
 * needs one — without it the data would live in the embedded database on the instance's own disk
 * (a pod's, lost at its next reschedule). The message never repeats the URL (it holds a password).
 */
export const databaseUrlProblem = (url: Option.Option<Redacted.Redacted<string>>, appEnv: AppEnv): string | undefined => {
  if (Option.isNone(url)) {
    return appEnv === "production"
      ? "DATABASE_URL must be set when APP_ENV=production: without it the data would live in the embedded " +
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
export const issuerUrlProblem = (url: string, appEnv: AppEnv, allowHttp: boolean): string | undefined => {
  let protocol: string
  try {
    protocol = new URL(url).protocol
  } catch {
    return "OIDC_ISSUER_URL must be an absolute https:// URL"
  }
  if (protocol !== "https:" && protocol !== "http:") return "OIDC_ISSUER_URL must be an absolute https:// URL"
  if (protocol === "http:" && appEnv === "production" && !allowHttp) {
    return "OIDC_ISSUER_URL must be an https:// URL when APP_ENV=production " +
      "(set OIDC_ALLOW_HTTP_ISSUER=true only where the network to the provider is trusted)"
  }
  return undefined
}

/** `LOG_LEVEL` accepts `warn` as well as `warning`; the shape keeps one spelling. */
const LogLevelSetting = Schema.Literals(["trace", "debug", "info", "warn", "warning", "error", "fatal", "none"])

export const appConfig: Effect.Effect<AppConfigShape, Config.ConfigError> = Effect.gen(function*() {
  const appEnv = yield* Config.Literals(["development", "production"], "APP_ENV").pipe(Config.withDefault("development"))
  const oidcAllowHttpIssuer = yield* Config.Boolean("OIDC_ALLOW_HTTP_ISSUER").pipe(Config.withDefault(false))
  const oidcIssuerUrl = yield* nonEmpty("OIDC_ISSUER_URL").pipe(Config.map(Option.map((u) => u.trim().replace(/\/+$/, ""))))
  if (Option.isSome(oidcIssuerUrl)) {
    const problem = issuerUrlProblem(oidcIssuerUrl.value, appEnv, oidcAllowHttpIssuer)
    if (problem !== undefined) return yield* Effect.fail(invalid("OIDC_ISSUER_URL", oidcIssuerUrl.value, problem))
  }
  const databaseUrl = yield* nonEmptyRedacted("DATABASE_URL")
  const databaseProblem = databaseUrlProblem(databaseUrl, appEnv)
  if (databaseProblem !== undefined) return yield* Effect.fail(invalid("DATABASE_URL", "<redacted>", databaseProblem))
  const port = yield* Config.Port("PORT").pipe(Config.withDefault(8000))
  const adminPort = yield* optionalPort("ADMIN_PORT")
  if (Option.isSome(adminPort) && adminPort.value === port) {
    return yield* Effect.fail(invalid("ADMIN_PORT", String(adminPort.value), "ADMIN_PORT must differ from PORT (or be empty to serve everything on PORT)"))
  }
  return {
    port,
    host: yield* Config.String("HOST").pipe(Config.withDefault("0.0.0.0")),
    adminPort,
    startupTimeoutSeconds: yield* positiveInt("STARTUP_TIMEOUT_SECONDS", 60),
    appEnv,
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
    redisUrl: yield* nonEmptyRedacted("REDIS_URL"),
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
    readCacheMaxBytes: yield* nonNegativeInt("READ_CACHE_MAX_BYTES", 33_554_432)
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
  /** For tests: the defaults with some values replaced. */
  static readonly layerTest = (overrides: Partial<AppConfigShape>) =>
    Layer.effect(AppConfig, Effect.map(appConfig, (c) => ({ ...c, ...overrides })))
}
