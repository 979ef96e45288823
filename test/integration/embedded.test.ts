/**
 * The embedded database (docs/operations.md#the-embedded-database): PGlite starts and runs in a
 * thread of its own, so the service's event loop keeps turning meanwhile; and one process at a
 * time opens a DATA_DIR — `npm run migrate` beside a running `npm start` is refused in one line,
 * leaving the data alone, and runs once the service is gone; a lock left by a killed process is
 * taken over.
 */
import { Effect, Exit, Option, Scope } from "effect"
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { embeddedPostgres } from "../../src/Db/Database.ts"
import { type Cleanups, runCleanups, startService } from "../support/Launcher.ts"
import { login, request, seedEmbeddedDatabase } from "../support/TestApp.ts"

const cleanups: Cleanups = []
afterEach(() => runCleanups(cleanups))

/** `npm run migrate` (`node src/migrate.ts`) on a DATA_DIR, JSON logs. */
const migrate = (dataDir: string) =>
  spawnSync(process.execPath, ["src/migrate.ts"], {
    env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", DATA_DIR: dataDir, LOG_FORMAT: "json" },
    encoding: "utf8",
    timeout: 120_000
  })

describe("the embedded database", () => {
  it("starts off the event loop: the loop's longest stall meanwhile is a small part of the start", async () => {
    let last = performance.now()
    let longest = 0
    const ticker = setInterval(() => {
      const now = performance.now()
      longest = Math.max(longest, now - last)
      last = now
    }, 5)
    const scope = Effect.runSync(Scope.make())
    const started = performance.now()
    try {
      await Effect.runPromise(Scope.provide(embeddedPostgres({ dataDir: Option.none(), maxConnections: 4 }), scope))
    } finally {
      clearInterval(ticker)
    }
    const took = performance.now() - started
    await Effect.runPromise(Scope.close(scope, Exit.void))
    // In the service's own thread PGlite's start is one synchronous stretch of nearly all of it.
    expect(longest).toBeLessThan(took / 2)
  })

  it("`npm run migrate` beside the running service on its DATA_DIR is refused in one line naming the service, exit 1, the data intact; after the service stops it migrates", async () => {
    const service = await startService({ seedEmbedded: true, cleanups, env: { RATE_LIMIT_ENABLED: "false" } })
    const dataDir = service.dataDir!
    const admin = (await login(service, "admin")).access_token
    const created = await request(service, "POST", "/authors", { token: admin, body: { name: "Kept Through Migrate" } })
    expect(created.status).toBe(201)
    const id = (created.body as { id: number }).id

    const refused = migrate(dataDir)
    expect(refused.status).toBe(1)
    const lines = refused.stderr.trim().split("\n")
    expect(lines).toHaveLength(1)
    expect(JSON.parse(lines[0]!)).toMatchObject({
      level: "FATAL",
      message: `Migrations not applied: the embedded database in ${join(dataDir, "pgdata")} is in use by process ${service.pid}`
    })

    // The service goes on reading and writing its database.
    expect(await request(service, "GET", `/authors/${id}`, { token: admin })).toMatchObject({ status: 200, body: { id, name: "Kept Through Migrate" } })
    expect((await request(service, "POST", "/authors", { token: admin, body: { name: "Written After" } })).status).toBe(201)
    expect(await service.stop()).toMatchObject({ code: 0 })
    expect(existsSync(join(dataDir, "pgdata.lock"))).toBe(false)

    const migrated = migrate(dataDir)
    expect({ status: migrated.status, stderr: migrated.stderr }).toEqual({ status: 0, stderr: "" })
    expect(migrated.stdout).toContain("Migrations are up to date")

    // Everything written is still there for the next start.
    const again = await startService({ env: { DATA_DIR: dataDir, RATE_LIMIT_ENABLED: "false" }, cleanups })
    const token = (await login(again, "admin")).access_token
    const names = await request(again, "GET", "/authors?search=t", { token })
    expect((names.body as Array<{ name: string }>).map((a) => a.name).sort()).toEqual(["Kept Through Migrate", "Written After"])
  })

  it("a lock left by a process that is gone is taken over, and released at exit", () => {
    const dataDir = mkdtempSync(join(tmpdir(), "ads-embedded-"))
    cleanups.push(async () => rmSync(dataDir, { recursive: true, force: true }))
    seedEmbeddedDatabase(dataDir)
    const gone = spawnSync(process.execPath, ["-e", ""]).pid!
    writeFileSync(join(dataDir, "pgdata.lock"), JSON.stringify({ pid: gone }))

    const migrated = migrate(dataDir)
    expect({ status: migrated.status, stderr: migrated.stderr }).toEqual({ status: 0, stderr: "" })
    expect(existsSync(join(dataDir, "pgdata.lock"))).toBe(false)
  })
})
