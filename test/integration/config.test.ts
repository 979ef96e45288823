/**
 * CONTRACT §2: an invalid value stops startup with a message naming the variable. The real
 * entry point is spawned with one bad variable at a time. And the settings whose defaults depend
 * on others (OIDC_AUDIENCE).
 */
import { ConfigProvider, Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { appConfig, tokenAudience } from "../../src/Config.ts"
import { freePort, spawnService } from "../support/Spawn.ts"

const dataDir = mkdtempSync(join(tmpdir(), "ads-config-"))
afterAll(() => rmSync(dataDir, { recursive: true, force: true }))

const cases: ReadonlyArray<readonly [string, string]> = [
  ["PORT", "not-a-port"],
  ["APP_ENV", "staging"],
  ["RATE_LIMIT_ENABLED", "maybe"],
  ["RATE_LIMIT_PER_MINUTE", "-5"],
  ["TRUSTED_PROXIES", "300.1.1.1/8"],
  ["ALLOWED_WS_ORIGINS", "[1, 2"],
  ["LOGIN_MAX_FAILURES", "-1"],
  ["LOGIN_FAILURE_WINDOW_SECONDS", "0"]
]

describe("invalid configuration stops startup", () => {
  // Spawned together: each start costs a second or two of module loading.
  it("each bad variable → non-zero exit, stderr names the variable", async () => {
    const runs = await Promise.all(cases.map(async ([name, value]) => {
      const service = spawnService({ DATA_DIR: join(dataDir, name), PORT: String(await freePort()), [name]: value })
      return { name, code: await service.exited, stderr: service.stderr() }
    }))
    for (const run of runs) {
      expect(run.code, run.name).not.toBe(0)
      expect(run.stderr, run.name).toContain(run.name)
    }
  }, 120_000)

  it("APP_ENV=production without OIDC_ISSUER_URL refuses the built-in identity provider", async () => {
    const service = spawnService({ DATA_DIR: dataDir, PORT: String(await freePort()), APP_ENV: "production" })
    expect(await service.exited).not.toBe(0)
    expect(service.stderr()).toMatch(/built-in identity provider.*OIDC_ISSUER_URL/)
  }, 60_000)
})

describe("OIDC_AUDIENCE (CONTRACT §2)", () => {
  const audienceOf = (env: Record<string, string>) =>
    Effect.runPromise(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })), Effect.map(tokenAudience))
    )

  it("production: defaults to OIDC_CLIENT_ID; a value replaces it; none switches the check off", async () => {
    expect(await audienceOf({ APP_ENV: "production" })).toBe("author-directory")
    expect(await audienceOf({ APP_ENV: "production", OIDC_CLIENT_ID: "other-client" })).toBe("other-client")
    expect(await audienceOf({ APP_ENV: "production", OIDC_AUDIENCE: "api" })).toBe("api")
    expect(await audienceOf({ APP_ENV: "production", OIDC_AUDIENCE: "none" })).toBeUndefined()
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
