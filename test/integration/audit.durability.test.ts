/**
 * "Nothing is lost" (docs/audit.md#guarantees), against real PostgreSQL and Redis — the Redis cases
 * in each mode the run offers (one server, a Redis Cluster, a Sentinel group: RedisModes.ts):
 * PostgreSQL cut for a while under load (a TCP proxy in front of it), the scope closed (SIGTERM)
 * while records wait, and a `kill -9` of the real process with the Redis journal. Each counts
 * answered requests against stored records.
 */
import { Option, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { SHARDS, streamKey } from "../../src/AuditLogs/Journal.ts"
import type { RedisConnection } from "../../src/Store/Redis.ts"
import { journalEntries } from "../support/AuditJournal.ts"
import { proxiedDatabase } from "../support/DatabaseServer.ts"
import { type Cleanups, freePort, runCleanups, startService } from "../support/Launcher.ts"
import { eventually } from "../support/Eventually.ts"
import { type TcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { connectTo, redisModes } from "../support/RedisModes.ts"
import { login, startTestApp, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

/** Sends `count` authenticated requests, `concurrency` at a time; returns the request ids answered. */
const load = async (url: string, token: string, agent: string, count: number, answered: Array<string> = [], concurrency = 10) => {
  let next = 0
  const worker = async () => {
    while (next < count) {
      next++
      try {
        const res = await fetch(`${url}/authors`, { headers: { authorization: `Bearer ${token}`, "user-agent": agent } })
        await res.arrayBuffer()
        answered.push(res.headers.get("x-request-id") ?? "")
      } catch {
        // not answered (the process died): not owed a record
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  return answered
}

const storedIds = async (dbUrl: string, agent: string) => {
  const client = new pg.Client({ connectionString: dbUrl })
  await client.connect()
  try {
    const { rows } = await client.query<{ request_id: string }>("SELECT request_id FROM audit_logs WHERE user_agent = $1", [agent])
    return rows.map((r) => r.request_id)
  } finally {
    await client.end()
  }
}

/**
 * Every answered request has exactly one record. With `exact`, no other record either; after a
 * kill a request may have been recorded whose answer never reached the client (allowed).
 */
const expectAllStoredOnce = async (dbUrl: string, agent: string, answered: ReadonlyArray<string>, exact = true) => {
  let stored: Array<string> = []
  const want = new Set(answered)
  await eventually(async () => (stored = await storedIds(dbUrl, agent)).filter((id) => want.has(id)).length >= want.size, "every answered request's record")
  expect(new Set(stored).size).toBe(stored.length) // no duplicates after retries and redelivery
  expect(want.size).toBe(answered.length)
  if (exact) expect([...stored].sort()).toEqual([...answered].sort())
  else expect(stored.filter((id) => want.has(id))).toHaveLength(answered.length)
}

describe.runIf(TEST_DATABASE_URL !== undefined)("audit durability with PostgreSQL", () => {
  let db: TestDatabase
  let proxy: TcpProxy

  const cleanups: Cleanups = []
  beforeAll(async () => void ({ db, proxy } = await proxiedDatabase(cleanups)))
  afterAll(() => runCleanups(cleanups))

  const variants = [
    { name: "in-process buffer", redis: undefined },
    ...redisModes.map((mode) => ({ name: `Redis journal, ${mode.name}`, redis: mode }))
  ]

  it.each(variants)("PostgreSQL cut under load, then back: no record lost ($name)", async ({ redis }) => {
    const app = await startTestApp({
      config: {
        databaseUrl: Option.some(Redacted.make(viaProxy(db.url!, proxy))),
        rateLimitEnabled: false,
        ...(redis !== undefined ? { redis: Option.some(redis.target), redisKeyPrefix: `test:${randomUUID()}:` } : {})
      }
    })
    let cut = false
    try {
      const token = (await login(app, "admin")).access_token
      const agent = `outage-${randomUUID()}`
      const answered = [...await load(app.url, token, agent, 100)]
      await proxy.cut()
      cut = true
      answered.push(...await load(app.url, token, agent, 150)) // answered 500: PostgreSQL is away, records wait
      await proxy.restore()
      cut = false
      answered.push(...await load(app.url, token, agent, 50))
      expect(answered).toHaveLength(300)
      await expectAllStoredOnce(db.url!, agent, answered)
    } finally {
      if (cut) await proxy.restore()
      await app.close()
    }
  })

  it("closing the app (SIGTERM) flushes records still waiting for PostgreSQL", async () => {
    const app = await startTestApp({ config: { databaseUrl: Option.some(Redacted.make(viaProxy(db.url!, proxy))), rateLimitEnabled: false } })
    const token = (await login(app, "admin")).access_token
    const agent = `sigterm-${randomUUID()}`
    await proxy.cut()
    const answered = await load(app.url, token, agent, 80)
    const closing = app.close() // the flush retries against the cut database…
    await proxy.restore() // …and completes once it is back, before the close returns
    await closing
    expect(await storedIds(db.url!, agent)).toHaveLength(answered.length)
    expect((await storedIds(db.url!, agent)).sort()).toEqual([...answered].sort())
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("audit flush on SIGTERM (real process)", () => {
  it("records waiting for PostgreSQL at SIGTERM are written before the process exits 0", async () => {
    const cleanups: Cleanups = []
    try {
      const { db, proxy } = await proxiedDatabase(cleanups)
      const service = await startService({
        env: { DATABASE_URL: viaProxy(db.url!, proxy), RATE_LIMIT_ENABLED: "false", LOG_LEVEL: "error" },
        ready: "/health",
        cleanups
      })
      const url = service.url
      const token = (await login({ url }, "admin")).access_token
      const agent = `term-${randomUUID()}`
      await proxy.cut()
      const answered = await load(url, token, agent, 60)
      service.child.kill("SIGTERM")
      await proxy.restore() // the shutdown flush is retrying; it completes once PostgreSQL is back
      expect(await service.exited).toBe(0)
      expect((await storedIds(db.url!, agent)).sort()).toEqual([...answered].sort())
    } finally {
      await runCleanups(cleanups)
    }
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("audit durability with Redis", () => {
  it.each(redisModes)("kill -9 under load loses no record: the restarted instance writes the pending stream entries ($name)", async (mode) => {
    const cleanups: Cleanups = []
    const { db, proxy } = await proxiedDatabase(cleanups)
    const dataDir = mkdtempSync(join(tmpdir(), "ads-kill-"))
    cleanups.push(async () => rmSync(dataDir, { recursive: true, force: true }))
    const servicePort = await freePort()
    const env = {
      PORT: String(servicePort),
      DATABASE_URL: viaProxy(db.url!, proxy),
      ...mode.env,
      REDIS_KEY_PREFIX: `test:${randomUUID()}:`,
      DATA_DIR: dataDir,
      RATE_LIMIT_ENABLED: "false",
      LOG_LEVEL: "error"
    }
    try {
      const first = await startService({ env, ready: "/health", cleanups })
      const url = first.url
      const token = (await login({ url }, "admin")).access_token
      const agent = `kill9-${randomUUID()}`
      const answered = [...await load(url, token, agent, 100)]
      // PostgreSQL away: the records of the next requests exist only in the Redis Stream.
      await proxy.cut()
      const duringCut: Array<string> = []
      const during = load(url, token, agent, 2000, duringCut)
      await eventually(() => duringCut.length >= 200, "requests answered while PostgreSQL is cut")
      first.child.kill("SIGKILL")
      await during
      answered.push(...duringCut)
      expect(await first.exited).toBe("SIGKILL")
      await proxy.restore()

      const second = await startService({ env, ready: "/health", cleanups })
      try {
        await expectAllStoredOnce(db.url!, agent, answered, false)
      } finally {
        await second.stop()
      }
    } finally {
      await runCleanups(cleanups)
    }
  })
})

for (const mode of redisModes) describe.runIf(TEST_DATABASE_URL !== undefined)(`audit Redis journal appends (${mode.name})`, () => {
  let db: TestDatabase
  let proxy: TcpProxy
  let redis: RedisConnection

  const cleanups: Cleanups = []
  beforeAll(async () => {
    const made = await proxiedDatabase(cleanups)
    db = made.db
    proxy = made.proxy
    redis = connectTo(mode)
    cleanups.push(async () => void redis.disconnect())
  })
  afterAll(() => runCleanups(cleanups))

  const startWithRedis = (prefix: string) =>
    startTestApp({
      config: {
        databaseUrl: Option.some(Redacted.make(viaProxy(db.url!, proxy))),
        rateLimitEnabled: false,
        redis: Option.some(mode.target),
        redisKeyPrefix: prefix
      }
    })

  it("every answered request's record is already in the stream (concurrent records share one entry)", async () => {
    const prefix = `test:${randomUUID()}:`
    const app = await startWithRedis(prefix)
    let cut = false
    try {
      const token = (await login(app, "admin")).access_token
      const agent = `stream-${randomUUID()}`
      // PostgreSQL away: nothing leaves the stream, so it holds exactly what was appended.
      await proxy.cut()
      cut = true
      const answered = await load(app.url, token, agent, 120, [], 40)
      const { v3: current } = await journalEntries(redis, prefix)
      const inStream = current.flatMap((e) => e.records).map((r) => r.entry.request_id)
      expect(answered).toHaveLength(120)
      expect(inStream).toEqual(expect.arrayContaining(answered))
      // 40 requests at a time: records offered while an append is under way share the next entry.
      expect(current.length).toBeLessThan(inStream.length)
      await proxy.restore()
      cut = false
      await expectAllStoredOnce(db.url!, agent, answered)
    } finally {
      if (cut) await proxy.restore()
      await app.close()
    }
  })

  it("an XADD Redis refuses falls back to the in-process buffer: the record is still stored", async () => {
    const prefix = `test:${randomUUID()}:`
    const streams = SHARDS.map((shard) => streamKey(prefix, shard))
    // A string where each shard's stream should be: every XADD fails with WRONGTYPE.
    await Promise.all(streams.map((stream) => redis.set(stream, "not a stream")))
    const app = await startWithRedis(prefix)
    try {
      const token = (await login(app, "admin")).access_token
      const agent = `refused-${randomUUID()}`
      const answered = await load(app.url, token, agent, 30)
      expect(answered).toHaveLength(30)
      await expectAllStoredOnce(db.url!, agent, answered)
      expect(await Promise.all(streams.map((stream) => redis.type(stream)))).toEqual(streams.map(() => "string"))
    } finally {
      await app.close()
      await Promise.all(streams.map((stream) => redis.del(stream)))
    }
  })
})
