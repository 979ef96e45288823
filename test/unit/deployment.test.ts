/**
 * The deployment files agree with the code: the Keycloak realm with config/dev-users.json, the
 * compose file with docs/deployment.md, the Dockerfile with docs/operations.md#shutdown (and
 * test/integration/image.test.ts runs the files its runtime stage copies), .env.example with
 * docs/configuration.md#settings.
 */
import { ConfigProvider, Effect, Option } from "effect"
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { describe, expect, it } from "vitest"
import { parse } from "yaml"
import { appConfig } from "../../src/Config.ts"

type Json = Record<string, unknown>
const readJson = (path: string) => JSON.parse(readFileSync(path, "utf8")) as unknown

describe("deploy/keycloak realm export", () => {
  const realm = readJson("deploy/keycloak/author-directory-realm.json") as Json
  const devUsers = readJson("config/dev-users.json") as Array<{ username: string; password: string; roles: Array<string> }>
  const ROLES = ["admin", "user", "get-authors", "create-author", "update-author", "delete-author"]

  it("defines the public client author-directory with direct access grants", () => {
    const client = (realm["clients"] as Array<Json>).find((c) => c["clientId"] === "author-directory")
    expect(client).toMatchObject({ publicClient: true, directAccessGrantsEnabled: true, enabled: true })
  })

  it("locks an account out temporarily after repeated failures (brute-force detection on, never a permanent lockout)", () => {
    expect(realm).toMatchObject({ bruteForceProtected: true, permanentLockout: false, failureFactor: 10, maxFailureWaitSeconds: 900 })
  })

  it("defines all six roles", () => {
    const roles = ((realm["roles"] as Json)["realm"] as Array<Json>).map((r) => r["name"])
    expect([...roles].sort()).toEqual([...ROLES].sort())
  })

  it("has the demo users of config/dev-users.json with the same roles, passwords = usernames", () => {
    const users = realm["users"] as Array<Json>
    expect(users.map((u) => u["username"]).sort()).toEqual(devUsers.map((u) => u.username).sort())
    for (const dev of devUsers) {
      expect(dev.password).toBe(dev.username)
      const user = users.find((u) => u["username"] === dev.username)!
      expect([...(user["realmRoles"] as Array<string>)].sort()).toEqual([...dev.roles].sort())
      expect(user["credentials"]).toEqual([{ type: "password", value: dev.username, temporary: false }])
      expect(user).toMatchObject({ enabled: true, email: expect.any(String), firstName: expect.any(String), lastName: expect.any(String) })
    }
  })
})

describe("docker-compose.yml", () => {
  const compose = parse(readFileSync("docker-compose.yml", "utf8")) as { services: Record<string, Json> }

  it("runs PostgreSQL, Redis with expiry notifications, Keycloak importing the realm, and the service", () => {
    const { postgres, redis, keycloak, app } = compose.services
    expect(postgres?.["image"]).toMatch(/^postgres:/)
    expect((redis?.["command"] as Array<string>).join(" ")).toContain("--notify-keyspace-events Ex")
    expect(keycloak?.["command"]).toEqual(expect.arrayContaining(["start-dev", "--import-realm"]))
    expect(keycloak?.["volumes"]).toEqual(expect.arrayContaining([expect.stringMatching(/^\.\/deploy\/keycloak:\/opt\/keycloak\/data\/import/)]))
    expect(app?.["build"]).toBe(".")
    expect(app?.["environment"]).toMatchObject({
      DATABASE_URL: expect.stringMatching(/^postgres:\/\/.*@postgres:5432\//),
      REDIS_URL: expect.stringMatching(/^redis:\/\/redis:6379/),
      OIDC_ISSUER_URL: "http://keycloak:8080/realms/author-directory",
      OIDC_CLIENT_ID: "author-directory"
    })
  })

  it("gives the app an environment the service's own configuration accepts (it would exit at start otherwise)", async () => {
    const env = Object.fromEntries(Object.entries(compose.services["app"]?.["environment"] as Json).map(([k, v]) => [k, String(v)]))
    const config = await Effect.runPromise(appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))))
    expect(config.appEnv).toBe("production")
    expect(Option.getOrUndefined(config.oidcIssuerUrl)).toBe("http://keycloak:8080/realms/author-directory")
  })
})

describe("Dockerfile", () => {
  const dockerfile = readFileSync("Dockerfile", "utf8")
  it("multi-stage on one pinned Node 24 release (slim), production dependencies only, a non-root user, a HEALTHCHECK, plain node on the built JavaScript", () => {
    const bases = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((m) => m[1])
    expect(bases).toHaveLength(2)
    // A full release, optionally with its digest: never a floating `24-slim` or `latest`.
    for (const base of bases) expect(base).toMatch(/^node:24\.\d+\.\d+-slim(@sha256:[0-9a-f]{64})?$/)
    expect(new Set(bases).size).toBe(1)
    // docs/deployment.md names that release, and no other Node image.
    const tag = bases[0]!.replace(/@sha256:.*$/, "")
    expect([...readFileSync("docs/deployment.md", "utf8").matchAll(/`(node:[^`]+)`/g)].map((m) => m[1])).toEqual([tag])
    expect(dockerfile).toMatch(/^RUN npm ci --omit=dev\b/m)
    expect(dockerfile).toMatch(/^COPY --from=deps \/app\/node_modules/m)
    expect(dockerfile).toMatch(/^USER (?!root)\S+$/m)
    expect(dockerfile).toMatch(/^HEALTHCHECK /m)
    expect(dockerfile).toMatch(/^RUN npm run build$/m)
    expect(dockerfile).toMatch(/^COPY --from=deps \/app\/dist \.\/dist$/m)
    // The image runs the service with the V8 options `npm start` gives it.
    const start = (JSON.parse(readFileSync("package.json", "utf8")) as { scripts: Record<string, string> }).scripts["start"]!
    const v8Options = start.split(" ").filter((arg) => arg.startsWith("--max-"))
    expect(v8Options).toEqual(["--max-semi-space-size=32"])
    expect(dockerfile).toContain(`CMD [${["node", ...v8Options, "dist/main.js"].map((arg) => JSON.stringify(arg)).join(", ")}]`)
    expect(dockerfile).not.toContain("tsx")
  })

  it("the runtime image copies only what the built service reads, and the build context leaves the rest out", () => {
    const runtime = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "))
    const copies = [...runtime.matchAll(/^COPY (.+)$/gm)].map((m) => m[1])
    expect(copies).toEqual([
      "--from=deps /app/node_modules ./node_modules",
      "package.json ./",
      "migrations migrations",
      "proto proto",
      "--from=deps /app/dist ./dist"
    ])
    expect(runtime).not.toMatch(/^COPY \. /m)
    const ignored = new Set(readFileSync(".dockerignore", "utf8").split("\n").filter((l) => l !== "" && !l.startsWith("#")))
    for (const path of ["node_modules", "dist", ".env", ".git", "test", "docs", "config", ".ci", "*.md", "deploy", ".data"]) {
      expect(ignored.has(path), path).toBe(true)
    }
    // What the build and runtime stages copy is in the context.
    for (const path of ["package.json", "package-lock.json", "scripts", "src", "migrations", "proto"]) expect(ignored.has(path), path).toBe(false)
  })

  // docs/operations.md#health-and-probes: /livez is the liveness probe; /health and /readyz answer 503 during a database
  // outage, which must not mark the container unhealthy. The probe's own command is run against a
  // server that answers like the service in a database outage, then like a broken one.
  it("the HEALTHCHECK probes /livez: healthy while /livez is 200 (even with /health and /readyz 503), unhealthy otherwise", async () => {
    const healthcheck = /^HEALTHCHECK [^\n]*\\\n\s*CMD (\[.*\])$/m.exec(dockerfile)
    expect(healthcheck).not.toBeNull()
    const command = JSON.parse(healthcheck![1]!) as Array<string>
    expect(command.slice(0, 2)).toEqual(["node", "-e"])
    expect(command[2]).toContain("/livez")
    expect(command[2]).not.toMatch(/\/health|\/readyz/)
    let livez = 200
    const paths: Array<string> = []
    const server = createServer((req, res) => {
      paths.push(req.url ?? "")
      const status = req.url === "/livez" ? livez : 503
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(status === 200 ? { status: "ok" } : { status: "unhealthy" }))
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const port = (server.address() as AddressInfo).port
    const probe = () =>
      new Promise<number | null>((resolve) => {
        const child = spawn(process.execPath, ["-e", command[2]!], { env: { ...process.env, PORT: String(port) }, stdio: "ignore" })
        child.on("exit", resolve)
      })
    try {
      expect(await probe()).toBe(0)
      livez = 500
      expect(await probe()).toBe(1)
      expect(paths).toEqual(["/livez", "/livez"])
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })
})

describe(".env.example", () => {
  const lines = readFileSync(".env.example", "utf8").split("\n")
  const documented = new Map(lines.flatMap((l) => {
    const m = /^# ([A-Z][A-Z0-9_]+)=(.*)$/.exec(l)
    return m ? [[m[1]!, m[2]!] as const] : []
  }))

  it("lists every documented variable (and the tuning variables)", () => {
    for (const name of ["PORT", "HOST", "APP_ENV", "LOG_LEVEL", "LOG_FORMAT", "DATABASE_URL", "DATABASE_POOL_MAX", "DATABASE_PREPARED_STATEMENTS", "DATA_DIR", "REDIS_URL",
      "OIDC_ISSUER_URL", "OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET", "OIDC_AUDIENCE", "AUTH_USERS_FILE", "RATE_LIMIT_ENABLED",
      "RATE_LIMIT_PER_MINUTE", "RATE_LIMIT_BURST", "RATE_LIMIT_FAIL_MODE", "TRUSTED_PROXIES", "WS_MAX_CONNECTIONS_PER_USER",
      "WS_MESSAGE_RATE_LIMIT", "WS_AUTH_TIMEOUT_SECONDS", "ALLOWED_WS_ORIGINS", "MAX_REQUEST_BODY_BYTES", "WS_MAX_MESSAGE_BYTES",
      "REDIS_KEY_PREFIX", "AUDIT_LOG_ENABLED", "PROFILING_ENABLED", "PROFILING_OUTPUT_DIR", "PROFILING_INTERVAL_SECONDS",
      "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "WS_SESSION_GRACE_SECONDS", "WS_SLOT_TTL_SECONDS",
      "DATABASE_STATEMENT_TIMEOUT_SECONDS", "WS_MAX_CONNECTIONS", "OIDC_ALLOW_HTTP_ISSUER", "CORS_ALLOWED_ORIGINS",
      "STARTUP_TIMEOUT_SECONDS", "ADMIN_PORT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]) {
      expect(documented.has(name), name).toBe(true)
    }
  })

  it("shows the defaults the service really uses (development)", async () => {
    const defaults = await Effect.runPromise(appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: {} }))))
    const expected: Record<string, string> = {
      PORT: String(defaults.port),
      HOST: defaults.host,
      ADMIN_PORT: Option.match(defaults.adminPort, { onNone: () => "", onSome: String }),
      STARTUP_TIMEOUT_SECONDS: String(defaults.startupTimeoutSeconds),
      APP_ENV: defaults.appEnv,
      LOG_LEVEL: defaults.logLevel,
      LOG_FORMAT: defaults.logFormat,
      DATABASE_POOL_MAX: String(defaults.databasePoolMax),
      DATABASE_PREPARED_STATEMENTS: String(defaults.databasePreparedStatements),
      DATA_DIR: defaults.dataDir,
      REDIS_KEY_PREFIX: defaults.redisKeyPrefix,
      OIDC_CLIENT_ID: defaults.oidcClientId,
      AUTH_USERS_FILE: defaults.authUsersFile,
      RATE_LIMIT_ENABLED: String(defaults.rateLimitEnabled),
      RATE_LIMIT_PER_MINUTE: String(defaults.rateLimitPerMinute),
      RATE_LIMIT_BURST: String(defaults.rateLimitBurst),
      RATE_LIMIT_FAIL_MODE: defaults.rateLimitFailMode,
      WS_MAX_CONNECTIONS_PER_USER: String(defaults.wsMaxConnectionsPerUser),
      WS_MESSAGE_RATE_LIMIT: String(defaults.wsMessageRateLimit),
      WS_AUTH_TIMEOUT_SECONDS: String(defaults.wsAuthTimeoutSeconds),
      WS_SESSION_GRACE_SECONDS: String(defaults.wsSessionGraceSeconds),
      WS_SLOT_TTL_SECONDS: String(defaults.wsSlotTtlSeconds),
      ALLOWED_WS_ORIGINS: defaults.allowedWsOrigins.join(","),
      MAX_REQUEST_BODY_BYTES: String(defaults.maxRequestBodyBytes),
      WS_MAX_MESSAGE_BYTES: String(defaults.wsMaxMessageBytes),
      AUDIT_LOG_ENABLED: String(defaults.auditLogEnabled),
      PROFILING_ENABLED: String(defaults.profilingEnabled),
      PROFILING_OUTPUT_DIR: defaults.profilingOutputDir,
      PROFILING_INTERVAL_SECONDS: String(defaults.profilingIntervalSeconds),
      OTEL_SERVICE_NAME: defaults.otelServiceName
    }
    for (const [name, value] of Object.entries(expected)) expect(documented.get(name), name).toBe(value)
    expect(Option.isNone(defaults.databaseUrl) && Option.isNone(defaults.redis) && Option.isNone(defaults.oidcIssuerUrl)).toBe(true)
  })
})
