/**
 * SIGTERM ends the real service process within 10 s in every state (CONTRACT §9 "Signals"), and an
 * unanswering Redis slows no request (CONTRACT §6): PostgreSQL cut or blackholed behind a TCP proxy
 * with audit records waiting, Redis blackholed with RATE_LIMIT_FAIL_MODE=open, and a record the
 * database refuses. Each case prints its figures.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { freePort, spawnService, type Spawned, waitFor } from "../support/Spawn.ts"
import { hostPort, startTcpProxy, type TcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { createPostgresDatabase, login, type TestDatabase, TEST_DATABASE_URL, TEST_REDIS_URL } from "../support/TestApp.ts"

const CONTRACT_EXIT_MS = 10_000

interface Running {
  readonly url: string
  readonly service: Spawned
}

const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

const startService = async (env: Record<string, string>): Promise<Running> => {
  const dataDir = mkdtempSync(join(tmpdir(), "ads-fault-"))
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const service = spawnService({ PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, RATE_LIMIT_ENABLED: "false", LOG_LEVEL: "error", ...env })
  cleanups.push(async () => {
    if (service.child.exitCode === null && service.child.signalCode === null) {
      service.child.kill("SIGKILL")
      await service.exited
    }
    rmSync(dataDir, { recursive: true, force: true })
  })
  await waitFor(async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200, "the service to be ready", 60_000)
  return { url, service }
}

const database = async (): Promise<{ db: TestDatabase; proxy: TcpProxy }> => {
  const db = await createPostgresDatabase(TEST_DATABASE_URL!)
  const { host, port } = hostPort(db.url!)
  const proxy = await startTcpProxy(host, port)
  cleanups.push(async () => {
    await proxy.close()
    await db.dispose()
  })
  return { db, proxy }
}

/** Sends SIGTERM and resolves with the exit code and how long it took. */
const terminate = async ({ service }: Running) => {
  const started = performance.now()
  service.child.kill("SIGTERM")
  const code = await service.exited
  return { code, ms: Math.round(performance.now() - started) }
}

/** `count` authenticated requests, 8 at a time; resolves with their statuses (0: not answered) and the slowest answer. */
const load = async (url: string, token: string, count: number) => {
  const statuses: Array<number> = []
  let slowest = 0
  let next = 0
  const worker = async () => {
    while (next++ < count) {
      const started = performance.now()
      try {
        const res = await fetch(`${url}/authors`, { headers: { authorization: `Bearer ${token}` } })
        await res.arrayBuffer()
        statuses.push(res.status)
      } catch {
        statuses.push(0) // not answered: the process is gone
      }
      slowest = Math.max(slowest, performance.now() - started)
    }
  }
  await Promise.all(Array.from({ length: 8 }, worker))
  return { statuses, slowestMs: Math.round(slowest) }
}

describe.runIf(TEST_DATABASE_URL !== undefined)("SIGTERM with PostgreSQL unavailable", () => {
  for (const fault of ["cut", "blackholed"] as const) {
    it(`exits within 10 s with PostgreSQL ${fault} and audit records waiting for it`, async () => {
      const { db, proxy } = await database()
      const running = await startService({ DATABASE_URL: viaProxy(db.url!, proxy) })
      const token = (await login(running, "admin")).access_token
      const before = await load(running.url, token, 20)
      expect(before.statuses.every((s) => s === 200)).toBe(true)
      if (fault === "cut") await proxy.cut()
      else proxy.blackhole()
      // Answered however they can (5xx while the database is away is not the point here): each leaves an audit record behind.
      const during = await Promise.race([
        load(running.url, token, 10),
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 5_000))
      ])
      const { code, ms } = await terminate(running)
      console.log(`[fault] SIGTERM with PostgreSQL ${fault}: exit ${code} after ${ms} ms (${during?.statuses.length ?? "some"} requests during the outage)`)
      expect(ms).toBeLessThan(CONTRACT_EXIT_MS)
    }, 60_000)
  }

  it("exits 0 promptly after a record the database refuses (a 3 KB username); requests after it are answered", async () => {
    const { db } = await database()
    const running = await startService({ DATABASE_URL: db.url! })
    const res = await fetch(`${running.url}/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "雨".repeat(1024), password: "x" })
    })
    expect(res.status).toBe(401)
    const token = (await login(running, "admin")).access_token
    expect((await load(running.url, token, 5)).statuses).toEqual([200, 200, 200, 200, 200])
    const { code, ms } = await terminate(running)
    console.log(`[fault] SIGTERM after a poison record: exit ${code} after ${ms} ms`)
    expect(code).toBe(0)
    expect(ms).toBeLessThan(CONTRACT_EXIT_MS)
  }, 60_000)
})

describe.runIf(TEST_DATABASE_URL !== undefined && TEST_REDIS_URL !== undefined)("Redis blackholed (accepts, never answers)", () => {
  it("RATE_LIMIT_FAIL_MODE=open: every request is still answered 200, and SIGTERM still exits within 10 s", async () => {
    const { db } = await database()
    const { host, port } = hostPort(TEST_REDIS_URL!)
    const redisProxy = await startTcpProxy(host, port)
    cleanups.push(() => redisProxy.close())
    const running = await startService({
      DATABASE_URL: db.url!,
      REDIS_URL: viaProxy(TEST_REDIS_URL!, redisProxy),
      REDIS_KEY_PREFIX: `fault:${Date.now().toString(36)}:`,
      RATE_LIMIT_ENABLED: "true",
      RATE_LIMIT_FAIL_MODE: "open"
    })
    const token = (await login(running, "admin")).access_token
    redisProxy.blackhole()
    const during = await load(running.url, token, 16)
    const { code, ms } = await terminate(running)
    console.log(`[fault] Redis blackholed: 16 requests answered ${[...new Set(during.statuses)].join("/")}, slowest ${during.slowestMs} ms; SIGTERM exit ${code} after ${ms} ms`)
    expect(during.statuses.every((s) => s === 200)).toBe(true)
    expect(ms).toBeLessThan(CONTRACT_EXIT_MS)
  }, 90_000)
})
