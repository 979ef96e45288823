/**
 * Starts the whole service on a random loopback port for a test file: its own database (a copy
 * of the PGlite template, or a fresh database on `TEST_DATABASE_URL`), its own DATA_DIR, the
 * built-in identity provider unless overridden.
 */
import { Context, Effect, Exit, Layer, type LogLevel, Option, Redacted, References, Scope } from "effect"
import { HttpServer } from "effect/http"
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { importJWK, SignJWT, type JWK } from "jose"
import * as App from "../../src/App.ts"
import { BUILTIN_ISSUER } from "../../src/Auth/BuiltinProvider.ts"
import { AppConfig, type AppConfigShape } from "../../src/Config.ts"
import { drainOnShutdown, NodeServer } from "../../src/Http/NodeServer.ts"

export const TEST_DATABASE_URL = process.env["TEST_DATABASE_URL"]
export const TEST_REDIS_URL = process.env["TEST_REDIS_URL"]

export interface TestDatabase {
  /** Undefined for the embedded database (the app starts PGlite from DATA_DIR). */
  readonly url: string | undefined
  readonly dispose: () => Promise<void>
}

/** A fresh, empty PostgreSQL database on the server of `TEST_DATABASE_URL`. */
export const createPostgresDatabase = async (adminUrl: string): Promise<TestDatabase> => {
  const name = `ads_test_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    dispose: async () => {
      const client = new pg.Client({ connectionString: adminUrl })
      await client.connect()
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await client.end()
    }
  }
}

/** Copies the PGlite template (or the data of `from`, a closed app's data directory) into `dataDir/pgdata`. */
export const seedEmbeddedDatabase = (dataDir: string, from?: string) => {
  const template = from === undefined ? process.env["ADS_PGLITE_TEMPLATE"] : join(from, "pgdata")
  if (template !== undefined) cpSync(template, join(dataDir, "pgdata"), { recursive: true })
}

export interface TestApp {
  readonly url: string
  readonly wsUrl: string
  readonly dataDir: string
  readonly databaseUrl: string | undefined
  /** Stops the app and removes its data directory (unless `keepDataDir`: then the caller removes it). */
  readonly close: (options?: { readonly keepDataDir?: boolean }) => Promise<void>
}

export interface TestAppOptions {
  /** "embedded" (default) or "postgres" (needs TEST_DATABASE_URL). */
  readonly database?: "embedded" | "postgres"
  /** With "postgres": this database (another test app's `databaseUrl`) instead of a fresh one; left in place at close. */
  readonly databaseUrl?: string
  /**
   * With "embedded": a copy of the database in this data directory (where an app that has been
   * closed kept it: its `DATA_DIR`) instead of the template, so two instances can hold the same rows.
   */
  readonly embeddedFrom?: string
  readonly config?: Partial<AppConfigShape>
  /** The minimum level logged ("Warn" unless given). */
  readonly logLevel?: LogLevel.LogLevel
  /** Replaces the tracing layer chosen from the configuration (e.g. an in-memory exporter). */
  readonly tracing?: Layer.Layer<never, never, AppConfig>
  /** Replaces the default logger (e.g. one writing JSON lines into an array). */
  readonly logger?: Layer.Layer<never>
  /** References the app reads, provided under it (e.g. the audit retention's schedule). */
  readonly references?: Layer.Layer<never>
  /**
   * The address the server listens on ("127.0.0.1" unless given). `"::"` (dual stack): the test's
   * IPv4 clients reach it as IPv4-mapped IPv6 peers (`::ffff:127.0.0.1`). `url` stays 127.0.0.1.
   */
  readonly host?: string
}

export const startTestApp = async (options: TestAppOptions = {}): Promise<TestApp> => {
  const dataDir = mkdtempSync(join(tmpdir(), "ads-test-"))
  const database: TestDatabase = options.database !== "postgres"
    ? { url: undefined, dispose: async () => {} }
    : options.databaseUrl !== undefined
    ? { url: options.databaseUrl, dispose: async () => {} }
    : await createPostgresDatabase(requireEnv(TEST_DATABASE_URL, "TEST_DATABASE_URL"))
  if (database.url === undefined) seedEmbeddedDatabase(dataDir, options.embeddedFrom)
  const config: Partial<AppConfigShape> = {
    dataDir,
    databaseUrl: database.url === undefined ? Option.none() : Option.some(Redacted.make(database.url)),
    databasePoolMax: 5,
    redis: Option.none(),
    oidcIssuerUrl: Option.none(),
    authUsersFile: "config/dev-users.json",
    profilingEnabled: false,
    profilingOutputDir: join(dataDir, "profiling"),
    ...options.config
  }
  // As main.ts wires it: the port opens once the app is up, drainOnShutdown wraps it all.
  const layer = drainOnShutdown(8_000).pipe(
    Layer.provideMerge(App.layer(NodeServer.layer({ port: 0, host: options.host ?? "127.0.0.1" }), options.tracing)),
    Layer.provide(AppConfig.layerTest(config)),
    Layer.provide(Layer.succeed(References.MinimumLogLevel, options.logLevel ?? "Warn")),
    Layer.provide(options.logger ?? Layer.empty),
    Layer.provide(options.references ?? Layer.empty)
  )
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  const address = Context.get(context, HttpServer.HttpServer).address
  if (address._tag === "UnixPathAddress") throw new Error("expected a TCP address")
  const url = `http://127.0.0.1:${address.port}`
  return {
    url,
    wsUrl: url.replace(/^http/, "ws"),
    dataDir,
    databaseUrl: database.url,
    close: async (closing = {}) => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await database.dispose()
      if (closing.keepDataDir !== true) rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

const requireEnv = (value: string | undefined, name: string) => {
  if (value === undefined) throw new Error(`${name} is not set`)
  return value
}

/** Logs in through `POST /login` (the built-in provider's users: admin, editor, reader). */
export const login = async (app: Pick<TestApp, "url">, username: string, password = username) => {
  const res = await fetch(`${app.url}/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password })
  })
  if (res.status !== 200) throw new Error(`login ${username} failed: ${res.status}`)
  return (await res.json()) as { access_token: string; refresh_token: string; expires_in: number }
}

/** Signs a token with the built-in provider's key of a test app, with any claims (e.g. expired). */
export const signToken = async (
  app: Pick<TestApp, "dataDir">,
  claims: Record<string, unknown>,
  options: { readonly expiresIn?: string | number; readonly audience?: string; readonly issuer?: string } = {}
) => {
  const jwk = JSON.parse(readFileSync(join(app.dataDir, "dev-idp-key.json"), "utf8")) as JWK & { kid: string }
  const key = await importJWK(jwk, "ES256")
  return new SignJWT({ typ: "Bearer", ...claims })
    .setProtectedHeader({ alg: "ES256", kid: jwk.kid })
    .setIssuer(options.issuer ?? BUILTIN_ISSUER)
    .setAudience(options.audience ?? "author-directory")
    .setSubject(typeof claims["sub"] === "string" ? claims["sub"] : "test-user")
    .setIssuedAt()
    .setExpirationTime(options.expiresIn ?? "5m")
    .sign(key)
}

export const authHeader = (token: string) => ({ authorization: `Bearer ${token}` })

/** A JSON request helper returning status, headers and parsed body. */
export const request = async (
  app: Pick<TestApp, "url">,
  method: string,
  path: string,
  options: { readonly token?: string; readonly body?: unknown; readonly headers?: Record<string, string> } = {}
) => {
  const res = await fetch(`${app.url}${path}`, {
    method,
    headers: {
      ...(options.body !== undefined ? { "content-type": "application/json" } : {}),
      ...(options.token !== undefined ? authHeader(options.token) : {}),
      ...options.headers
    },
    ...(options.body !== undefined ? { body: typeof options.body === "string" ? options.body : JSON.stringify(options.body) } : {})
  })
  const text = await res.text()
  let body: unknown = text
  try {
    body = text === "" ? null : JSON.parse(text)
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, headers: res.headers, body }
}
