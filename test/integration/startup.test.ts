/**
 * Start-up as an operator meets it, on the real process (`node dist/main.js`, as the image runs
 * it): the port opens first and answers while the database cannot be reached — `/livez` 200,
 * `/readyz` and `/health` 503 with the health report, anything else 503 `Service starting` — the
 * database is tried again until STARTUP_TIMEOUT_SECONDS, and past that the process exits 1 after
 * one JSON log line naming the cause. The database is reached through a TCP proxy that refuses
 * connections until the test restores it.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { startDatabaseServer } from "../support/DatabaseServer.ts"
import { rawWs } from "../support/RawWs.ts"
import { type Cleanups, freePort, runCleanups, startService } from "../support/Launcher.ts"
import { eventually } from "../support/Eventually.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"

const cleanups: Cleanups = []
afterEach(() => runCleanups(cleanups))

const STARTING_REPORT = {
  status: "unhealthy",
  database: "unhealthy",
  redis: "unhealthy",
  websocket: { status: "unhealthy", active_connections: 0 }
}

/** The service on loopback with `env`, its own DATA_DIR, killed at the end of the test if still running; not waited for. */
const spawnOn = async (env: Record<string, string>) => {
  const service = await startService({ env: { RATE_LIMIT_ENABLED: "false", ...env }, ready: "none", cleanups })
  return { service, url: service.url }
}

const parsed = (line: string): Record<string, unknown> | undefined => {
  try {
    const value: unknown = JSON.parse(line)
    return typeof value === "object" && value !== null ? value as Record<string, unknown> : undefined
  } catch {
    return undefined
  }
}

const answer = async (url: string, init?: RequestInit) => {
  const res = await fetch(url, init)
  return { status: res.status, body: (await res.json()) as unknown }
}

describe("start-up while the database cannot be reached", () => {
  it("the port is open meanwhile: /livez 200, /readyz and /health 503 with the health report, other requests 503 Service starting; once the database is up the service is ready", async () => {
    const database = await startDatabaseServer()
    cleanups.push(database.close)
    const target = hostPort(database.url)
    const proxy = await startTcpProxy(target.host, target.port)
    cleanups.push(proxy.close)
    await proxy.cut() // refuses every connection until restored
    const { service, url } = await spawnOn({ DATABASE_URL: viaProxy(database.url, proxy), LOG_LEVEL: "warn", STARTUP_TIMEOUT_SECONDS: "300" })

    // The service has tried the database and is waiting to try again.
    await eventually(() => {
      if (service.child.exitCode !== null) throw new Error(`the service exited ${service.child.exitCode}:\n${service.lines().join("\n")}`)
      return service.lines().some((line) => String(parsed(line)?.["message"]).startsWith("Database not reachable yet (attempt 1)"))
    }, "the first failed attempt")
    const warning = service.lines().map(parsed).find((line) => String(line?.["message"]).startsWith("Database not reachable yet"))
    expect(warning).toMatchObject({ level: "WARN" })
    expect(String(warning?.["message"])).toMatch(/ECONNREFUSED/)

    expect(await answer(`${url}/livez`)).toEqual({ status: 200, body: { status: "ok" } })
    expect(await answer(`${url}/readyz`)).toEqual({ status: 503, body: STARTING_REPORT })
    expect(await answer(`${url}/health`)).toEqual({ status: 503, body: STARTING_REPORT })
    for (const path of ["/authors", "/metrics", "/docs", "/"]) {
      expect(await answer(`${url}${path}`), path).toEqual({ status: 503, body: { detail: "Service starting" } })
    }
    expect(await answer(`${url}/login`, { method: "POST", headers: { "content-type": "application/json" }, body: "{\"username\":\"admin\",\"password\":\"admin\"}" }))
      .toEqual({ status: 503, body: { detail: "Service starting" } })
    const ws = rawWs(`${url.replace("http", "ws")}/web`)
    cleanups.push(async () => ws.destroy())
    const upgrade = await ws.upgraded
    expect([upgrade.status, JSON.parse(upgrade.body)]).toEqual([503, { detail: "Service starting" }])

    // The database comes up: the next attempt connects, migrates, and the service serves.
    await proxy.restore()
    await eventually(async () => {
      if (service.child.exitCode !== null) throw new Error(`the service exited ${service.child.exitCode}:\n${service.lines().join("\n")}`)
      return (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200
    }, "the service to be ready")
    expect(await answer(`${url}/authors`)).toEqual({ status: 401, body: { detail: "Not authenticated" } })
    service.child.kill("SIGTERM")
    expect(await service.exited).toBe(0)
  })

  it("STARTUP_TIMEOUT_SECONDS=2 and the database never comes up: exit 1 after exactly one line, JSON, naming the cause", async () => {
    const proxy = await startTcpProxy("127.0.0.1", await freePort())
    cleanups.push(proxy.close)
    await proxy.cut()
    const { service } = await spawnOn({ DATABASE_URL: `postgres://authors:secret-password@127.0.0.1:${proxy.port}/authors`, LOG_LEVEL: "error", STARTUP_TIMEOUT_SECONDS: "2" })
    expect(await service.exited).toBe(1)
    const lines = service.lines()
    expect(lines).toHaveLength(1)
    const line = parsed(lines[0]!)
    expect(line).toMatchObject({ level: "FATAL" })
    expect(Object.keys(line!).sort()).toEqual(["cause", "level", "message", "timestamp"])
    const message = String(line!["message"])
    // What stopped it: the database, the setting that bounded the wait — tried more than once; the
    // cause: the driver's and the socket's own words.
    expect(message).toMatch(/^Service failed to start: The database could not be reached within STARTUP_TIMEOUT_SECONDS=2 \((\d+) attempts\)$/)
    expect(line!["cause"]).toMatch(/ECONNREFUSED 127\.0\.0\.1:\d+$/)
    expect(Number(/\((\d+) attempts\)/.exec(message)![1])).toBeGreaterThan(1)
    // Never the URL's password.
    expect(lines[0]).not.toContain("secret-password")
  })
})

describe("every exit says why, in one FATAL line (docs/operations.md#exits)", () => {
  /**
   * A module loaded ahead of the service (`node --import`) that, on a signal, rejects a promise
   * nobody waits for (SIGUSR2) or throws outside any fiber (SIGHUP): what a library's stray
   * promise or callback does.
   */
  const inject = () => {
    const dir = mkdtempSync(join(tmpdir(), "ads-inject-"))
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }))
    const file = join(dir, "inject.mjs")
    writeFileSync(file, [
      "const secret = ['pw', '42'].join('-')",
      "process.on('SIGUSR2', () => { Promise.reject(new Error(`injected rejection: redis://:${secret}@cache:6379`)) })",
      "process.on('SIGHUP', () => { setImmediate(() => { throw new TypeError('injected throw') }) })"
    ].join("\n"))
    return file
  }

  it.each([
    ["SIGUSR2", "an unhandled promise rejection: injected rejection: redis://:[REDACTED]@cache:6379"],
    ["SIGHUP", "an uncaught exception: injected throw"]
  ] as const)("%s (a stray rejection or throw): exit 1, the last line FATAL JSON naming it, the stack in cause, no secret", async (signal, what) => {
    const service = await startService({ env: { RATE_LIMIT_ENABLED: "false" }, nodeArgs: ["--import", inject()], seedEmbedded: true, cleanups })
    service.child.kill(signal)
    expect(await service.exited).toBe(1)
    const last = parsed(service.lines().at(-1)!)
    expect(last).toMatchObject({ level: "FATAL", message: `Service failed: ${what}` })
    expect(String(last!["cause"])).toMatch(/^(Type)?Error: injected .*\n\s+at /)
    expect(service.lines().join("\n")).not.toContain("pw-42")
  })
})
