/**
 * docs/configuration.md#settings: an invalid value stops startup with a message naming the variable — one log line
 * (JSON with LOG_FORMAT=json) and exit code 1. The real entry point is spawned with one bad
 * variable at a time. And the settings whose defaults or rules depend on others (OIDC_AUDIENCE, an
 * https:// OIDC_ISSUER_URL and a DATABASE_URL in production, ADMIN_PORT beside PORT).
 */
import { ConfigProvider, Effect, Option } from "effect"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { appConfig, modeLine, tokenAudience } from "../../src/Config.ts"
import type { RedisTarget } from "../../src/Config/Redis.ts"
import { startDatabaseServer } from "../support/DatabaseServer.ts"
import { freePort, type Service, startService } from "../support/Launcher.ts"

const dataDir = mkdtempSync(join(tmpdir(), "ads-config-"))
afterAll(() => rmSync(dataDir, { recursive: true, force: true }))

/** The variable, its bad value, and what else the environment holds. */
const cases: ReadonlyArray<readonly [string, string, Record<string, string>?]> = [
  ["PORT", "not-a-port"],
  ["APP_ENV", "staging"],
  ["RATE_LIMIT_ENABLED", "maybe"],
  ["RATE_LIMIT_PER_MINUTE", "-5"],
  ["TRUSTED_PROXIES", "300.1.1.1/8"],
  ["ALLOWED_WS_ORIGINS", "[1, 2"],
  ["LOGIN_MAX_FAILURES", "-1"],
  ["LOGIN_FAILURE_WINDOW_SECONDS", "0"],
  ["OIDC_ISSUER_URL", "http://idp.example/realms/author-directory", { APP_ENV: "production", DATABASE_URL: "postgres://u@db.example/authors" }],
  ["DATABASE_URL", "mysql://authors@db.example/authors"],
  ["STARTUP_TIMEOUT_SECONDS", "0"],
  ["ADMIN_PORT", "70000"],
  ["ADMIN_PORT", "18555", { PORT: "18555" }],
  ["REDIS_CLUSTER_NODES", "10.0.0.1:6379,10.0.0.2"],
  ["REDIS_SENTINELS", "10.0.0.1:26379", { REDIS_URL: "redis://:secret-password@10.0.0.9:6379/0" }]
]

/** A production environment that passes every check (the database URL need not answer for configuration checks). */
const PRODUCTION = { APP_ENV: "production", DATABASE_URL: "postgres://authors@db.example/authors" }

/** The one line a failed start leaves on stderr, parsed (LOG_FORMAT=json: the test spawns with it). */
const failureOf = (service: Service) => {
  const lines = service.stderr().split("\n").filter((line) => line.trim() !== "")
  expect(lines, service.stderr()).toHaveLength(1)
  const line = JSON.parse(lines[0]!) as Record<string, unknown>
  expect(line).toMatchObject({ level: "FATAL" })
  return String(line["message"])
}

describe("LOG_LEVEL", () => {
  const level = (value: string) =>
    Effect.runPromise(Effect.result(appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: { LOG_LEVEL: value } })))))

  it.each([["warn", "warning"], ["warning", "warning"], ["debug", "debug"], ["none", "none"]])("LOG_LEVEL=%s is taken as %s", async (value, expected) => {
    const result = await level(value)
    expect(result._tag === "Success" ? result.success.logLevel : result.failure).toBe(expected)
  })

  it("anything else stops startup", async () => {
    expect((await level("loud"))._tag).toBe("Failure")
  })
})

describe("npm start reads .env when present (.env.example)", () => {
  it("the start script's own node arguments, with the .env file pointed elsewhere, set PORT from it", async () => {
    const script = (JSON.parse(readFileSync("package.json", "utf8")) as { scripts: Record<string, string> }).scripts["start"]!
    expect(script).toMatch(/^exec node --max-semi-space-size=32 --env-file-if-exists=\.env dist\/main\.js$/)
    const port = await freePort()
    const envFile = join(dataDir, "dotenv")
    writeFileSync(envFile, `PORT=${port}\nHOST=127.0.0.1\nDATA_DIR=${join(dataDir, "dotenv-data")}\nLOG_LEVEL=warn\n`)
    const args = script.replace(/^exec node /, "").replace("=.env", `=${envFile}`).split(" ")
    expect(args.at(-1)).toBe("dist/main.js")
    // Only PATH and HOME from here: PORT and the rest come from the .env file.
    const service = await startService({ defaults: "none", nodeArgs: args.slice(0, -1), port, ready: "/livez" })
    await service.stop()
  })
})

describe("invalid configuration stops startup", () => {
  // Spawned together, before the cases: each start costs a second or two of module loading.
  let runs: ReadonlyArray<{ readonly code: number | string; readonly service: Service }>
  beforeAll(async () => {
    runs = await Promise.all(cases.map(async ([name, value, others], i) => {
      const service = await startService({ env: { DATA_DIR: join(dataDir, `${name}-${i}`), PORT: String(await freePort()), ...others, [name]: value }, ready: "none" })
      return { code: await service.exited, service }
    }))
  })

  it.each(cases.map(([name, value], index) => ({ name, value, index })))("$name=$value → exit 1 after one JSON line on stderr naming the variable; the port never opens", ({ name, index }) => {
    const run = runs[index]!
    expect(run.code).toBe(1)
    const message = failureOf(run.service)
    expect(message).toMatch(/^Service failed to start: /)
    expect(message).toContain(name)
    expect(run.service.stdout()).not.toContain("Port open")
  })

  it("a URL is never repeated in the failure (it may hold a password)", () => {
    expect(failureOf(runs[cases.findIndex(([name]) => name === "DATABASE_URL")]!.service)).not.toContain("db.example")
  })

  it("two of REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS: the failure names both and repeats no password", () => {
    const message = failureOf(runs[cases.findIndex(([name]) => name === "REDIS_SENTINELS")]!.service)
    expect(message).toMatch(/found REDIS_URL and REDIS_SENTINELS/)
    expect(message).not.toContain("secret-password")
  })

  it("APP_ENV=production without DATABASE_URL refuses to start, naming DATABASE_URL (the embedded database would live on the pod's disk)", async () => {
    const service = await startService({ env: { DATA_DIR: dataDir, APP_ENV: "production", OIDC_ISSUER_URL: "https://idp.example/realms/author-directory", DATABASE_URL: undefined }, ready: "none" })
    expect(await service.exited).toBe(1)
    expect(failureOf(service)).toMatch(/DATABASE_URL must be set when APP_ENV=production: .*embedded database on this instance's own disk/)
    // Refused before anything started: no port, no embedded database.
    expect(service.stdout()).not.toMatch(/Port open|Embedded/)
  })

  it("APP_ENV=production without OIDC_ISSUER_URL refuses the built-in identity provider", async () => {
    // The database is not reachable: the identity provider's refusal does not wait for it.
    const service = await startService({ env: { ...PRODUCTION, DATABASE_URL: `postgres://authors@127.0.0.1:${await freePort()}/authors`, DATA_DIR: dataDir }, ready: "none" })
    expect(await service.exited).toBe(1)
    expect(failureOf(service)).toMatch(/built-in identity provider.*OIDC_ISSUER_URL/)
  })
})

describe("Redis: one server, a Redis Cluster or a Sentinel group (docs/configuration.md#redis-cluster-and-sentinel)", () => {
  const redisOf = async (env: Record<string, string>) => {
    const result = await Effect.runPromise(Effect.result(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))
    ))
    return result._tag === "Success" ? result.success.redis : String(result.failure)
  }

  it("none of the three: no Redis; each one alone: its topology, with the credentials and TLS that apply to every mode", async () => {
    expect(await redisOf({ REDIS_PASSWORD: "p" })).toEqual(Option.none())
    const single = await redisOf({ REDIS_URL: "redis://127.0.0.1:6379/2" })
    expect(Option.getOrThrow(single as Option.Option<RedisTarget>)).toMatchObject({ topology: { _tag: "Single" }, tls: false })
    expect(Option.getOrThrow(await redisOf({
      REDIS_CLUSTER_NODES: " redis-0.redis:6379, 10.0.0.2:6380 ,[::1]:7000",
      REDIS_USERNAME: "svc",
      REDIS_PASSWORD: "pw",
      REDIS_TLS: "true"
    }) as Option.Option<RedisTarget>)).toMatchObject({
      topology: { _tag: "Cluster", nodes: [{ host: "redis-0.redis", port: 6379 }, { host: "10.0.0.2", port: 6380 }, { host: "::1", port: 7000 }] },
      username: Option.some("svc"),
      tls: true
    })
    const sentinel = Option.getOrThrow(await redisOf({ REDIS_SENTINELS: "s1:26379,s2:26379" }) as Option.Option<RedisTarget>)
    expect(sentinel.topology).toMatchObject({ _tag: "Sentinel", master: "mymaster", sentinels: [{ host: "s1", port: 26379 }, { host: "s2", port: 26379 }] })
    expect(Option.getOrThrow(await redisOf({ REDIS_SENTINELS: "s1:26379", REDIS_SENTINEL_MASTER: "authors" }) as Option.Option<RedisTarget>).topology)
      .toMatchObject({ master: "authors" })
  })

  it("more than one of REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS refuses to start, naming them; a password is never repeated", async () => {
    const both = await redisOf({ REDIS_URL: "redis://:hunter2@db.example:6379", REDIS_CLUSTER_NODES: "10.0.0.1:6379" })
    expect(both).toMatch(/Set only one of REDIS_URL, REDIS_CLUSTER_NODES and REDIS_SENTINELS .*found REDIS_URL and REDIS_CLUSTER_NODES/)
    expect(both).not.toContain("hunter2")
    expect(await redisOf({ REDIS_CLUSTER_NODES: "a:1", REDIS_SENTINELS: "b:2", REDIS_URL: "redis://c" })).toMatch(/found REDIS_URL and REDIS_CLUSTER_NODES and REDIS_SENTINELS/)
  })

  it("a node list that is not host:port pairs is refused, naming the variable", async () => {
    for (const bad of ["10.0.0.1", "10.0.0.1:0", "10.0.0.1:65536", "host:port", ":6379", "a b:1"]) {
      expect(await redisOf({ REDIS_SENTINELS: bad }), bad).toMatch(/REDIS_SENTINELS must be a comma-separated list of host:port/)
    }
  })
})

describe("NODE_ENV=production with APP_ENV unset applies the production rules; an explicit APP_ENV wins (docs/configuration.md#the-mode)", () => {
  const configOf = async (env: Record<string, string>) => {
    const result = await Effect.runPromise(Effect.result(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))
    ))
    if (result._tag === "Failure") throw new Error(String(result.failure))
    return result.success
  }
  const DATABASE = { DATABASE_URL: "postgres://authors@db.example/authors" }

  it("the mode and every default that follows it: production from NODE_ENV alone, APP_ENV over it either way", async () => {
    const byNode = await configOf({ NODE_ENV: "production", ...DATABASE })
    expect([byNode.appEnv, byNode.appEnvSource, byNode.logFormat, byNode.profilingEnabled, tokenAudience(byNode)])
      .toEqual(["production", "NODE_ENV", "json", false, "author-directory"])
    const overridden = await configOf({ NODE_ENV: "production", APP_ENV: "development" })
    expect([overridden.appEnv, overridden.appEnvSource, overridden.logFormat, overridden.profilingEnabled]).toEqual(["development", "APP_ENV", "pretty", true])
    expect((await configOf({ NODE_ENV: "development", APP_ENV: "production", ...DATABASE })).appEnv).toBe("production")
    for (const nodeEnv of ["development", "test", ""]) expect((await configOf({ NODE_ENV: nodeEnv })).appEnv, nodeEnv).toBe("development")
    // The refusals say which variable made it production.
    await expect(configOf({ NODE_ENV: "production" })).rejects.toThrow(/DATABASE_URL must be set when NODE_ENV=production and APP_ENV is unset/)
    await expect(configOf({ NODE_ENV: "production", ...DATABASE, OIDC_ISSUER_URL: "http://idp.example/realms/x" }))
      .rejects.toThrow(/OIDC_ISSUER_URL must be an https:\/\/ URL when NODE_ENV=production and APP_ENV is unset/)
  })

  it("NODE_ENV=production alone, no DATABASE_URL: exit 1 after one FATAL line — JSON without LOG_FORMAT, as production logs are — naming DATABASE_URL and why production", async () => {
    const service = await startService({ env: { DATA_DIR: dataDir, NODE_ENV: "production", LOG_FORMAT: undefined, PROFILING_ENABLED: undefined }, ready: "none" })
    expect(await service.exited).toBe(1)
    expect(failureOf(service)).toMatch(/^Service failed to start: DATABASE_URL must be set when NODE_ENV=production and APP_ENV is unset: .*embedded database/)
    expect(service.stdout()).not.toMatch(/Port open|Embedded/)
  })

  it("NODE_ENV=production with a database: the startup log says production and why, in JSON, profiling off", async () => {
    const database = await startDatabaseServer()
    try {
      const service = await startService({
        env: {
          DATA_DIR: join(dataDir, "node-env"),
          NODE_ENV: "production",
          LOG_FORMAT: undefined,
          PROFILING_ENABLED: undefined,
          DATABASE_URL: database.url,
          OIDC_ISSUER_URL: "https://127.0.0.1:9/realms/author-directory",
          PROFILING_OUTPUT_DIR: join(dataDir, "node-env-profiling")
        },
        ready: "/livez"
      })
      try {
        await service.logged("Listening on")
        const lines = service.stdout().split("\n").filter((line) => line.trim() !== "")
        const records = lines.map((line) => JSON.parse(line) as Record<string, unknown>)
        expect(records.find((r) => String(r["message"]).startsWith("Mode:"))).toMatchObject({
          level: "INFO",
          message: "Mode: production (NODE_ENV=production, APP_ENV unset)"
        })
        expect(await (await fetch(`${service.url}/api/profiling/status`)).json()).toMatchObject({ enabled: false })
      } finally {
        await service.stop()
      }
    } finally {
      await database.close()
    }
  })

  it("APP_ENV=development with NODE_ENV=production runs in development, and says so as a warning", async () => {
    const service = await startService({ env: { NODE_ENV: "production", APP_ENV: "development" }, seedEmbedded: true })
    try {
      const mode = service.logLines().filter((r) => String(r["message"]).startsWith("Mode:"))
      expect(mode).toHaveLength(1)
      expect(mode[0]).toMatchObject({ level: "WARN", message: expect.stringMatching(/^Mode: development \(APP_ENV=development wins over NODE_ENV=production\)/) })
      expect(service.stdout()).toContain("Embedded: database")
    } finally {
      await service.stop()
    }
  })

  it("without either: development, and the log says neither is set", async () => {
    const line = modeLine({ appEnv: "development", appEnvSource: "default", nodeEnv: Option.none() })
    expect(line).toEqual({ text: "Mode: development (APP_ENV unset, NODE_ENV unset)", warn: false })
    expect(modeLine({ appEnv: "production", appEnvSource: "APP_ENV", nodeEnv: Option.some("production") }))
      .toEqual({ text: "Mode: production (APP_ENV=production)", warn: false })
  })
})

describe("PROFILING_ENABLED (true in development, false in production)", () => {
  const profilingOf = async (env: Record<string, string>) =>
    (await Effect.runPromise(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))
    )).profilingEnabled

  it("defaults to the environment's; a value set replaces the default in either", async () => {
    expect(await profilingOf({})).toBe(true)
    expect(await profilingOf({ APP_ENV: "development" })).toBe(true)
    expect(await profilingOf(PRODUCTION)).toBe(false)
    expect(await profilingOf({ ...PRODUCTION, PROFILING_ENABLED: "true" })).toBe(true)
    expect(await profilingOf({ APP_ENV: "development", PROFILING_ENABLED: "false" })).toBe(false)
  })

  it("a production process with PROFILING_ENABLED unset reports profiling disabled and refuses a capture; without REDIS_URL it warns once that its stores are per instance and what its read cache sees", async () => {
    const productionDir = join(dataDir, "production")
    const database = await startDatabaseServer()
    let service: Service | undefined
    try {
      // No identity provider answers there: the instance serves but is not ready (its keys are
      // never fetched), so the wait is for "Listening on". Its http:// URL is accepted in
      // production because OIDC_ALLOW_HTTP_ISSUER says so.
      service = await startService({
        env: {
          DATA_DIR: productionDir,
          APP_ENV: "production",
          DATABASE_URL: database.url,
          OIDC_ISSUER_URL: "http://127.0.0.1:9/realms/author-directory",
          OIDC_ALLOW_HTTP_ISSUER: "true",
          PROFILING_OUTPUT_DIR: join(dataDir, "production-profiling"),
          PROFILING_ENABLED: undefined
        },
        ready: "/livez"
      })
      await service.logged("Listening on")
      const url = service.url
      const status = await fetch(`${url}/api/profiling/status`)
      expect(status.status).toBe(200)
      expect(await status.json()).toMatchObject({ enabled: false })
      const capture = await fetch(`${url}/api/profiling/reports`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" })
      expect(capture.status).toBe(409)
      expect(await capture.json()).toEqual({ detail: "Profiling is disabled" })
      const warnings = service.stdout().split("\n").filter((line) => line.includes("REDIS_URL is not set"))
      expect(warnings).toHaveLength(1)
      expect(JSON.parse(warnings[0]!)).toMatchObject({
        level: "WARN",
        message: expect.stringMatching(/rate limits, WebSocket connection counts, broadcasts and session expiry are per instance/)
      })
      expect(JSON.parse(warnings[0]!).message).toMatch(/the read cache learns of another instance's writes from PostgreSQL within a second, not before their response/)
    } finally {
      await service?.stop()
      await database.close()
    }
  })
})

describe("OIDC_ISSUER_URL: https:// in production", () => {
  const issuerOf = async (env: Record<string, string>) => {
    const result = await Effect.runPromise(Effect.result(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))
    ))
    return result._tag === "Success" ? result.success.oidcIssuerUrl.pipe(Option.getOrUndefined) : String(result.failure)
  }

  it("production refuses an http:// issuer, naming the variable, unless OIDC_ALLOW_HTTP_ISSUER=true says the network is trusted", async () => {
    const http = "http://keycloak:8080/realms/author-directory"
    const https = "https://keycloak.example.com/realms/author-directory"
    expect(await issuerOf({ ...PRODUCTION, OIDC_ISSUER_URL: http })).toMatch(/OIDC_ISSUER_URL must be an https:\/\/ URL when APP_ENV=production/)
    expect(await issuerOf({ ...PRODUCTION, OIDC_ISSUER_URL: `${https}/` })).toBe(https)
    expect(await issuerOf({ ...PRODUCTION, OIDC_ISSUER_URL: http, OIDC_ALLOW_HTTP_ISSUER: "true" })).toBe(http)
    expect(await issuerOf({ ...PRODUCTION, OIDC_ISSUER_URL: http, OIDC_ALLOW_HTTP_ISSUER: "false" })).toMatch(/OIDC_ISSUER_URL must be an https:\/\/ URL/)
    // Development (Keycloak on localhost) takes http.
    expect(await issuerOf({ OIDC_ISSUER_URL: http })).toBe(http)
    // Not a URL, or not http(s): refused anywhere.
    for (const bad of ["keycloak.example.com/realms/x", "ftp://keycloak.example.com/realms/x"]) {
      expect(await issuerOf({ OIDC_ISSUER_URL: bad }), bad).toMatch(/OIDC_ISSUER_URL must be an absolute https:\/\/ URL/)
    }
  })
})

describe("OIDC_AUDIENCE", () => {
  const audienceOf = (env: Record<string, string>) =>
    Effect.runPromise(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })), Effect.map(tokenAudience))
    )

  it("production: defaults to OIDC_CLIENT_ID; a value replaces it; none switches the check off", async () => {
    expect(await audienceOf(PRODUCTION)).toBe("author-directory")
    expect(await audienceOf({ ...PRODUCTION, OIDC_CLIENT_ID: "other-client" })).toBe("other-client")
    expect(await audienceOf({ ...PRODUCTION, OIDC_AUDIENCE: "api" })).toBe("api")
    expect(await audienceOf({ ...PRODUCTION, OIDC_AUDIENCE: "none" })).toBeUndefined()
  })

  it("development: unset means no check; a value is checked", async () => {
    expect(await audienceOf({})).toBeUndefined()
    expect(await audienceOf({ OIDC_AUDIENCE: "api" })).toBe("api")
  })

  it("failed-login slowing defaults: 10 failures per username in 900 s", async () => {
    const defaults = await Effect.runPromise(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: {} })))
    )
    expect([defaults.loginMaxFailures, defaults.loginFailureWindowSeconds]).toEqual([10, 900])
  })
})

describe("start-up, ports and traces settings", () => {
  const configOf = async (env: Record<string, string>) => {
    const result = await Effect.runPromise(Effect.result(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))
    ))
    if (result._tag === "Failure") throw new Error(String(result.failure))
    return result.success
  }

  it("STARTUP_TIMEOUT_SECONDS defaults to 60; a positive integer replaces it", async () => {
    expect((await configOf({})).startupTimeoutSeconds).toBe(60)
    expect((await configOf({ STARTUP_TIMEOUT_SECONDS: "5" })).startupTimeoutSeconds).toBe(5)
    await expect(configOf({ STARTUP_TIMEOUT_SECONDS: "1.5" })).rejects.toThrow(/STARTUP_TIMEOUT_SECONDS/)
  })

  it("ADMIN_PORT: unset or empty → none (everything on PORT); a port → that port", async () => {
    expect(Option.getOrUndefined((await configOf({})).adminPort)).toBeUndefined()
    expect(Option.getOrUndefined((await configOf({ ADMIN_PORT: "" })).adminPort)).toBeUndefined()
    expect(Option.getOrUndefined((await configOf({ ADMIN_PORT: " 9090 " })).adminPort)).toBe(9090)
    await expect(configOf({ ADMIN_PORT: "metrics" })).rejects.toThrow(/ADMIN_PORT must be a port number/)
    await expect(configOf({ PORT: "9090", ADMIN_PORT: "9090" })).rejects.toThrow(/ADMIN_PORT must differ from PORT/)
  })

  it("DATABASE_URL: required in production, a postgres:// URL anywhere", async () => {
    await expect(configOf({ APP_ENV: "production" })).rejects.toThrow(/DATABASE_URL must be set when APP_ENV=production/)
    expect((await configOf({ APP_ENV: "production", DATABASE_URL: "postgresql://u@db/authors" })).appEnv).toBe("production")
    expect(Option.isNone((await configOf({ DATABASE_URL: "" })).databaseUrl)).toBe(true)
    await expect(configOf({ DATABASE_URL: "db.example:5432/authors" })).rejects.toThrow(/DATABASE_URL must be a postgres:\/\/ URL/)
  })

  it("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is read beside OTEL_EXPORTER_OTLP_ENDPOINT", async () => {
    const config = await configOf({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://collector:4318/custom/traces", OTEL_EXPORTER_OTLP_ENDPOINT: "http://other:4318" })
    expect(Option.getOrUndefined(config.otelExporterOtlpTracesEndpoint)).toBe("http://collector:4318/custom/traces")
    expect(Option.getOrUndefined(config.otelExporterOtlpEndpoint)).toBe("http://other:4318")
    expect(Option.isNone((await configOf({})).otelExporterOtlpTracesEndpoint)).toBe(true)
  })
})
