/**
 * Every setting of the service, typed, with the defaults of CONTRACT §2.
 * An invalid value stops startup with a ConfigError that names the variable.
 */
import { Config, ConfigError, Context, Effect, Either, Layer, Option, Redacted } from "effect"
import { parseCidrList, type Cidr } from "./Http/ClientIp.ts"

export type AppEnv = "development" | "production"

export interface AppConfigShape {
  readonly port: number
  readonly host: string
  readonly appEnv: AppEnv
  readonly logLevel: "trace" | "debug" | "info" | "warning" | "error" | "fatal" | "none"
  readonly logFormat: "json" | "pretty"
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly databasePoolMax: number
  /** Parameterised statements as named prepared statements (DATABASE_URL only; never on embedded PGlite). */
  readonly databasePreparedStatements: boolean
  readonly dataDir: string
  readonly redisUrl: Option.Option<Redacted.Redacted<string>>
  readonly redisKeyPrefix: string
  readonly oidcIssuerUrl: Option.Option<string>
  readonly oidcClientId: string
  readonly oidcClientSecret: Option.Option<Redacted.Redacted<string>>
  readonly oidcAudience: Option.Option<string>
  readonly authUsersFile: string
  readonly rateLimitEnabled: boolean
  readonly rateLimitPerMinute: number
  readonly rateLimitBurst: number
  readonly rateLimitFailMode: "open" | "closed"
  readonly trustedProxies: ReadonlyArray<Cidr>
  readonly wsMaxConnectionsPerUser: number
  readonly wsMessageRateLimit: number
  readonly wsAuthTimeoutSeconds: number
  /** Beyond CONTRACT §2: how long a connection outlives its token's exp (CONTRACT §5: 10 s). */
  readonly wsSessionGraceSeconds: number
  /** Beyond CONTRACT §2: how long a crashed instance's connection slots stay counted (Redis). */
  readonly wsSlotTtlSeconds: number
  readonly allowedWsOrigins: ReadonlyArray<string>
  readonly maxRequestBodyBytes: number
  readonly wsMaxMessageBytes: number
  readonly auditLogEnabled: boolean
  readonly profilingEnabled: boolean
  readonly profilingOutputDir: string
  readonly profilingIntervalSeconds: number
  readonly otelExporterOtlpEndpoint: Option.Option<string>
  readonly otelServiceName: string
}

const positiveInt = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be a positive integer`, validation: (n) => n > 0 })
  )

const nonEmpty = (name: string) =>
  Config.string(name).pipe(Config.option, Config.map(Option.filter((s) => s.trim() !== "")))

const nonEmptyRedacted = (name: string) =>
  Config.redacted(name).pipe(Config.option, Config.map(Option.filter((s) => Redacted.value(s).trim() !== "")))

/** `ALLOWED_WS_ORIGINS`: comma-separated or a JSON array of strings. */
export const parseOriginList = (raw: string): Either.Either<ReadonlyArray<string>, string> => {
  const text = raw.trim()
  if (text.startsWith("[")) {
    try {
      const parsed: unknown = JSON.parse(text)
      if (Array.isArray(parsed) && parsed.every((x): x is string => typeof x === "string")) {
        return Either.right(parsed.map((s) => s.trim()).filter((s) => s !== ""))
      }
    } catch {
      // fall through to the error below
    }
    return Either.left("must be a JSON array of strings or a comma-separated list")
  }
  return Either.right(text.split(",").map((s) => s.trim()).filter((s) => s !== ""))
}

const fromParser = <A>(name: string, fallback: string, parse: (raw: string) => Either.Either<A, string>) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((raw) =>
      Either.mapLeft(parse(raw), (message) => ConfigError.InvalidData([name], `${name} ${message}`))
    )
  )

export const appConfig: Effect.Effect<AppConfigShape, ConfigError.ConfigError> = Effect.gen(function*() {
  const appEnv = yield* Config.literal("development", "production")("APP_ENV").pipe(Config.withDefault("development"))
  return {
    port: yield* Config.port("PORT").pipe(Config.withDefault(8000)),
    host: yield* Config.string("HOST").pipe(Config.withDefault("0.0.0.0")),
    appEnv,
    logLevel: yield* Config.literal("trace", "debug", "info", "warning", "error", "fatal", "none")("LOG_LEVEL").pipe(
      Config.withDefault("info")
    ),
    logFormat: yield* Config.literal("json", "pretty")("LOG_FORMAT").pipe(
      Config.withDefault(appEnv === "production" ? "json" : "pretty")
    ),
    databaseUrl: yield* nonEmptyRedacted("DATABASE_URL"),
    databasePoolMax: yield* positiveInt("DATABASE_POOL_MAX", 10),
    databasePreparedStatements: yield* Config.boolean("DATABASE_PREPARED_STATEMENTS").pipe(Config.withDefault(true)),
    dataDir: yield* Config.string("DATA_DIR").pipe(Config.withDefault("./.data")),
    redisUrl: yield* nonEmptyRedacted("REDIS_URL"),
    redisKeyPrefix: yield* Config.string("REDIS_KEY_PREFIX").pipe(Config.withDefault("authors:")),
    oidcIssuerUrl: yield* nonEmpty("OIDC_ISSUER_URL").pipe(Config.map(Option.map((u) => u.replace(/\/+$/, "")))),
    oidcClientId: yield* Config.string("OIDC_CLIENT_ID").pipe(Config.withDefault("author-directory")),
    oidcClientSecret: yield* nonEmptyRedacted("OIDC_CLIENT_SECRET"),
    oidcAudience: yield* nonEmpty("OIDC_AUDIENCE"),
    authUsersFile: yield* Config.string("AUTH_USERS_FILE").pipe(Config.withDefault("config/dev-users.json")),
    rateLimitEnabled: yield* Config.boolean("RATE_LIMIT_ENABLED").pipe(Config.withDefault(true)),
    rateLimitPerMinute: yield* positiveInt("RATE_LIMIT_PER_MINUTE", 60),
    rateLimitBurst: yield* Config.integer("RATE_LIMIT_BURST").pipe(
      Config.withDefault(10),
      Config.validate({ message: "RATE_LIMIT_BURST must be a non-negative integer", validation: (n) => n >= 0 })
    ),
    rateLimitFailMode: yield* Config.literal("open", "closed")("RATE_LIMIT_FAIL_MODE").pipe(Config.withDefault("open")),
    trustedProxies: yield* fromParser("TRUSTED_PROXIES", "", parseCidrList),
    wsMaxConnectionsPerUser: yield* positiveInt("WS_MAX_CONNECTIONS_PER_USER", 5),
    wsMessageRateLimit: yield* positiveInt("WS_MESSAGE_RATE_LIMIT", 100),
    wsAuthTimeoutSeconds: yield* positiveInt("WS_AUTH_TIMEOUT_SECONDS", 5),
    wsSessionGraceSeconds: yield* Config.integer("WS_SESSION_GRACE_SECONDS").pipe(
      Config.withDefault(10),
      Config.validate({ message: "WS_SESSION_GRACE_SECONDS must be a non-negative integer", validation: (n) => n >= 0 })
    ),
    wsSlotTtlSeconds: yield* positiveInt("WS_SLOT_TTL_SECONDS", 30),
    allowedWsOrigins: yield* fromParser("ALLOWED_WS_ORIGINS", "*", parseOriginList),
    maxRequestBodyBytes: yield* positiveInt("MAX_REQUEST_BODY_BYTES", 1_048_576),
    wsMaxMessageBytes: yield* positiveInt("WS_MAX_MESSAGE_BYTES", 65_536),
    auditLogEnabled: yield* Config.boolean("AUDIT_LOG_ENABLED").pipe(Config.withDefault(true)),
    profilingEnabled: yield* Config.boolean("PROFILING_ENABLED").pipe(Config.withDefault(appEnv !== "production")),
    profilingOutputDir: yield* Config.string("PROFILING_OUTPUT_DIR").pipe(Config.withDefault("profiling_reports")),
    profilingIntervalSeconds: yield* positiveInt("PROFILING_INTERVAL_SECONDS", 30),
    otelExporterOtlpEndpoint: yield* nonEmpty("OTEL_EXPORTER_OTLP_ENDPOINT"),
    otelServiceName: yield* Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("author-directory-service"))
  } satisfies AppConfigShape
})

export class AppConfig extends Context.Tag("App/Config")<AppConfig, AppConfigShape>() {
  /** Reads the environment (or the current ConfigProvider). */
  static readonly layer = Layer.effect(AppConfig, appConfig)
  /** For tests: the defaults with some values replaced. */
  static readonly layerWith = (overrides: Partial<AppConfigShape>) =>
    Layer.effect(AppConfig, Effect.map(appConfig, (c) => ({ ...c, ...overrides })))
}
