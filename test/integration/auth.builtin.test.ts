/**
 * The built-in development identity provider: scrypt `password_hash` users (hash printed by
 * `npm run hash-password`), Keycloak's lifetimes, its refusal to run in production, and its
 * startup warning when plain-text passwords are served beyond this machine.
 */
import { decodeJwt } from "jose"
import { execFile } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { plainPasswordWarning } from "../../src/Auth/BuiltinProvider.ts"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { request, startTestApp, type TestApp } from "../support/TestApp.ts"

const run = promisify(execFile)
const PASSWORD = "correct horse battery staple ☃"

let dir: string
let app: TestApp
let printedHash: string

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "ads-users-"))
  // The script as a user runs it (plain node), argument form.
  const { stdout } = await run(process.execPath, ["scripts/hash-password.ts", PASSWORD])
  printedHash = stdout.trim()
  const usersFile = join(dir, "users.json")
  writeFileSync(usersFile, JSON.stringify([
    { username: "hashed", password_hash: printedHash, roles: ["get-authors"], id: "hashed-user-id" },
    { username: "plain", password: "plain", roles: [] }
  ]))
  app = await startTestApp({ config: { rateLimitEnabled: false, authUsersFile: usersFile } })
})
afterAll(async () => {
  await app.close()
  rmSync(dir, { recursive: true, force: true })
})

describe("built-in identity provider", () => {
  it("npm run hash-password prints scrypt:<N>:<r>:<p>:<salt>:<key>", () => {
    expect(printedHash).toMatch(/^scrypt:\d+:\d+:\d+:[A-Za-z0-9+/]+=*:[A-Za-z0-9+/]+=*$/)
  })

  it("the printed hash logs in; a wrong password does not", async () => {
    const ok = await request(app, "POST", "/login", { body: { username: "hashed", password: PASSWORD } })
    expect(ok.status).toBe(200)
    const token = (ok.body as { access_token: string }).access_token
    expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
    const claims = decodeJwt(token)
    expect(claims).toMatchObject({ sub: "hashed-user-id", preferred_username: "hashed", realm_access: { roles: ["get-authors"] } })
    const bad = await request(app, "POST", "/login", { body: { username: "hashed", password: `${PASSWORD}x` } })
    expect(bad).toMatchObject({ status: 401, body: { detail: "Invalid credentials" } })
  })

  it("hash-password reads the password from stdin when no argument is given", async () => {
    const child = execFile(process.execPath, ["scripts/hash-password.ts"])
    child.stdin?.end("from stdin\n")
    const stdout = await new Promise<string>((resolve, reject) => {
      let out = ""
      child.stdout?.on("data", (d: Buffer) => (out += d.toString()))
      child.on("error", reject)
      child.on("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`exit ${code}`))))
    })
    const { verifyPassword } = await import("../../src/Auth/Passwords.ts")
    expect(await verifyPassword("from stdin", stdout.trim())).toBe(true)
  })

  it("access tokens live 300 s and refresh tokens 1800 s", async () => {
    const res = await request(app, "POST", "/login", { body: { username: "plain", password: "plain" } })
    expect(res.body).toMatchObject({ token_type: "Bearer", expires_in: 300, refresh_expires_in: 1800 })
    const body = res.body as { access_token: string; refresh_token: string }
    const access = decodeJwt(body.access_token)
    const refresh = decodeJwt(body.refresh_token)
    expect(access.exp! - access.iat!).toBe(300)
    expect(refresh.exp! - refresh.iat!).toBe(1800)
    expect(access["typ"]).toBe("Bearer")
    expect(refresh["typ"]).toBe("Refresh")
  })

  it("refuses to start with APP_ENV=production", async () => {
    await expect(startTestApp({ config: { appEnv: "production" } })).rejects.toThrow(/built-in identity provider/)
  })

  it("warns at startup when plain-text passwords (the shipped admin/admin…) are served beyond this machine", async () => {
    const startupWarnings = async (host: string) => {
      const lines: Array<string> = []
      const started = await startTestApp({
        config: { host, authUsersFile: "config/dev-users.json" },
        logger: layerLoggerTo("json", (line) => lines.push(line))
      })
      await started.close()
      return lines.map((l) => JSON.parse(l) as { level: string; message: string }).filter((l) => l.level === "WARN")
    }
    // The defaults (docs/configuration.md#settings): HOST=0.0.0.0 with the shipped users.
    const exposed = await startupWarnings("0.0.0.0")
    expect(exposed.map((l) => l.message)).toContainEqual(
      expect.stringMatching(/^Built-in identity provider: config\/dev-users\.json has plain-text passwords \(admin, editor, reader\) and HOST=0\.0\.0\.0 serves them/)
    )
    expect((await startupWarnings("127.0.0.1")).some((l) => l.message.includes("plain-text passwords"))).toBe(false)
    // Hashes only: nothing to warn about, on any address.
    const hashedOnly = [{ username: "hashed", password_hash: printedHash, roles: [] }]
    expect(plainPasswordWarning(hashedOnly, "0.0.0.0", "users.json")).toBeUndefined()
    expect(plainPasswordWarning([{ username: "plain", password: "plain", roles: [] }], "::1", "users.json")).toBeUndefined()
  })

  it("refuses a users file with a malformed password_hash at startup", async () => {
    const bad = join(dir, "bad-users.json")
    writeFileSync(bad, JSON.stringify([{ username: "x", password_hash: "md5:abc", roles: [] }]))
    await expect(startTestApp({ config: { authUsersFile: bad } })).rejects.toThrow(/AUTH_USERS_FILE/)
  })
})
