/**
 * The Dockerfile's runtime stage holds everything the service reads: a directory is assembled from
 * exactly the stage's COPY lines (dist/ built as the build stage builds it, node_modules linked),
 * and `node dist/main.js` — the image's CMD — is started there in production on PostgreSQL. It gets
 * ready, serves the documentation bundles, the .proto and its version in app_info, and
 * `node dist/migrate.js` runs the migrations from there. (No container runtime here: this checks
 * the file list, not the image build.)
 */
import { spawnSync } from "node:child_process"
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { OAuth2Server } from "oauth2-mock-server"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { stripTree } from "../../scripts/build.ts"
import { freePort, startService } from "../support/Launcher.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

const dockerfile = readFileSync("Dockerfile", "utf8")
const runtimeStage = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "))
const copies = [...runtimeStage.matchAll(/^COPY (?:--from=deps \/app\/)?(\S+) (\S+)$/gm)].map((m) => ({ from: m[1]!, to: m[2]! }))

/** The runtime stage's files: node_modules and dist/ from the build stage, the rest from the checkout. */
const assemble = (root: string) => {
  for (const { from, to } of copies) {
    const target = join(root, to === "./" ? from : to)
    if (from === "node_modules") symlinkSync(resolve("node_modules"), target, "dir")
    else if (from === "dist") stripTree(resolve("src"), target)
    else cpSync(from, target, { recursive: true })
  }
}

describe.runIf(TEST_DATABASE_URL !== undefined)("the Dockerfile's runtime stage", () => {
  let root: string
  let db: TestDatabase
  const env = (extra: Record<string, string>) => ({
    PATH: process.env["PATH"] ?? "",
    NODE_ENV: "production",
    APP_ENV: "production",
    LOG_FORMAT: "json",
    LOG_LEVEL: "error",
    DATABASE_URL: db.url!,
    // `node dist/migrate.js` never asks the issuer; the service fetches its keys at start (below, a
    // mock provider's).
    OIDC_ISSUER_URL: "https://idp.invalid/realms/author-directory",
    DATA_DIR: join(root, ".data"),
    PROFILING_OUTPUT_DIR: join(root, "profiling_reports"),
    ...extra
  })

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "ads-image-"))
    mkdirSync(join(root, ".data"))
    mkdirSync(join(root, "profiling_reports"))
    assemble(root)
    db = await createPostgresDatabase(TEST_DATABASE_URL!)
  })
  afterAll(async () => {
    await db?.dispose()
    if (root !== undefined) rmSync(root, { recursive: true, force: true })
  })

  it("copies package.json, migrations/, proto/, node_modules and dist/ (the build stage's)", () => {
    expect(copies.map((c) => c.from).sort()).toEqual(["dist", "migrations", "node_modules", "package.json", "proto"])
  })

  it("`node dist/migrate.js` migrates the database from there", () => {
    const run = spawnSync(process.execPath, ["dist/migrate.js"], { cwd: root, env: env({}), encoding: "utf8", timeout: 60_000 })
    expect(run.stderr).not.toMatch(/Error/)
    expect(run.status).toBe(0)
  })

  it("`node dist/main.js` gets ready and serves docs, the .proto and its version", async () => {
    // Ready needs the identity provider's keys: a mock provider on loopback (plain HTTP, allowed).
    const provider = new OAuth2Server()
    await provider.issuer.keys.generate("RS256")
    await provider.start(await freePort(), "127.0.0.1")
    const issuer = `http://127.0.0.1:${provider.address().port}`
    provider.issuer.url = issuer
    // The image's environment only (and HOME), in the staged directory.
    const service = await startService({
      defaults: "none",
      cwd: root,
      env: env({ PORT: String(await freePort()), HOST: "127.0.0.1", OIDC_ISSUER_URL: issuer, OIDC_ALLOW_HTTP_ISSUER: "true" })
    }).catch(async (error: unknown) => {
      await provider.stop()
      throw error
    })
    const base = service.url
    try {
      expect((await fetch(`${base}/livez`)).status).toBe(200)
      for (const path of ["/docs", "/redoc"]) {
        const page = await fetch(`${base}${path}`)
        expect(page.status, path).toBe(200)
        expect((await page.text()).length, path).toBeGreaterThan(100_000) // the bundle is inlined
      }
      const proto = await fetch(`${base}/proto/websocket.proto`)
      expect(proto.status).toBe(200)
      expect(await proto.text()).toBe(readFileSync("proto/websocket.proto", "utf8"))
      const version = (JSON.parse(readFileSync("package.json", "utf8")) as { version: string }).version
      expect(await (await fetch(`${base}/metrics`)).text()).toMatch(new RegExp(`^app_info\\{[^}]*version="${version.replaceAll(".", "\\.")}"`, "m"))
    } finally {
      // A process that already exited has failed the wait above, with its stderr.
      if (service.running()) expect((await service.stop()).code).toBe(0)
      await provider.stop()
    }
  })
})
