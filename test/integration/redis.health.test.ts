/**
 * `/health`'s `redis` is healthy only when Redis takes a write under REDIS_KEY_PREFIX
 * (docs/operations.md#health-and-probes): a Redis that answers PING but refuses writes — an ACL user
 * without write rights on the prefix, a read-only replica, `maxmemory` reached with `noeviction` —
 * is `unhealthy` (and /health 503), while the instance stays ready and serves per
 * RATE_LIMIT_FAIL_MODE. The log says so once, as the beginning of an outage with Redis's own reply,
 * not once per request (docs/operations.md#outages). Each Redis is a private `redis-server` this
 * file starts; and a service started as a child process with a user that may write nothing either
 * runs or leaves one FATAL line as its last (docs/operations.md#exits).
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Redis } from "ioredis"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { singleRedis } from "../../src/Config/Redis.ts"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { onPath } from "../support/Binaries.ts"
import { eventually } from "../support/Eventually.ts"
import { type Cleanups, runCleanups, startService } from "../support/Launcher.ts"
import { type RedisServer, startRedisServer } from "../support/RedisServer.ts"
import { connectWs } from "../support/WsClient.ts"
import { login, request, startTestApp } from "../support/TestApp.ts"

const PREFIX = `test-redis-health-${randomUUID()}:`

/** Runs `args` on `server` as its default user (a private server: its settings are this file's). */
const admin = async (server: RedisServer, ...args: Array<string>) => {
  const client = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  try {
    await client.connect()
    return await client.call(args[0]!, ...args.slice(1))
  } finally {
    client.disconnect()
  }
}

/** `redis://user:password@…` of the server. */
const asUser = (server: RedisServer, user: string, password: string) => {
  const url = new URL(server.url)
  url.username = user
  url.password = password
  return url.toString()
}

const cleanups: Cleanups = []
afterEach(() => runCleanups(cleanups))

describe.runIf(onPath("redis-server"))("redis is healthy only when a write under REDIS_KEY_PREFIX succeeds", () => {
  let primary: RedisServer
  /** Where the servers keep what replication writes to disk (not the working directory). */
  const dir = mkdtempSync(join(tmpdir(), "ads-redis-health-"))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))
  beforeAll(async () => {
    primary = await startRedisServer(["--dir", dir, "--repl-diskless-sync", "yes"])
    // May read and PING anything, write nothing (the review's managed-Redis user with the key
    // prefix outside its ACL fails the same way).
    await admin(primary, "ACL", "SETUSER", "reader", "on", ">reader-pw-9", "~*", "&*", "+@all", "-@write", "-config")
    await admin(primary, "ACL", "SETUSER", "elsewhere", "on", ">elsewhere-pw-9", "~other-prefix:*", "&*", "+@all", "-config")
    await admin(primary, "ACL", "SETUSER", "writer", "on", ">writer-pw-9", `~${PREFIX}*`, "&*", "+@all", "-config")
    // A managed-Redis style user: its keys and channels under the prefix, nothing else.
    await admin(primary, "ACL", "SETUSER", "prefixed", "on", ">prefixed-pw-9", `~${PREFIX}*`, `&${PREFIX}*`, "+@all", "-config")
    await admin(primary, "ACL", "SETUSER", "deaf", "on", ">deaf-pw-9", `~${PREFIX}*`, "resetchannels", "+@all", "-config")
  })
  afterAll(() => primary?.kill("SIGTERM"))

  /** The app on `redisUrl`, its log lines (info and above) collected. */
  const appOn = async (redisUrl: string) => {
    const lines: Array<string> = []
    const app = await startTestApp({
      config: { redis: Option.some(singleRedis(redisUrl)), redisKeyPrefix: PREFIX },
      logLevel: "Info",
      logger: layerLoggerTo("json", (line) => lines.push(line))
    })
    cleanups.push(app.close)
    return { app, records: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) }
  }

  /** /health and /readyz of a Redis that refuses writes; a few requests, then the log's outage lines. */
  const refusesWrites = async (redisUrl: string, reply: RegExp) => {
    const { app, records } = await appOn(redisUrl)
    const health = await request(app, "GET", "/health")
    expect({ status: health.status, body: health.body }).toEqual({
      status: 503,
      body: { status: "unhealthy", database: "healthy", redis: "unhealthy", websocket: { status: "healthy", active_connections: 0 } }
    })
    // Still ready: the instance serves per RATE_LIMIT_FAIL_MODE (open) without a working Redis.
    expect((await request(app, "GET", "/readyz")).status).toBe(200)
    const token = (await login(app, "admin")).access_token
    for (let i = 0; i < 5; i++) expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
    const began = records().filter((r) => String(r["message"]).startsWith("Outage began: Redis"))
    expect(began).toHaveLength(1)
    expect(began[0]).toMatchObject({ level: "WARN", dependency: "redis" })
    expect(String(began[0]!["cause"])).toMatch(reply)
    expect(records().filter((r) => String(r["message"]).startsWith("Rate limiter unavailable"))).toEqual([])
    for (const r of records()) expect(typeof r["message"]).toBe("string")
    return { app, records }
  }

  it("a user allowed to write under the prefix: healthy", async () => {
    const { app } = await appOn(asUser(primary, "writer", "writer-pw-9"))
    const health = await request(app, "GET", "/health")
    expect({ status: health.status, body: health.body }).toMatchObject({ status: 200, body: { status: "healthy", redis: "healthy" } })
  })

  it("a user whose channels are only the prefix's: broadcasts reach clients (the key-expiry channel is subscribed on its own), sessions on timers, said once", async () => {
    const { app, records } = await appOn(asUser(primary, "prefixed", "prefixed-pw-9"))
    const token = (await login(app, "admin")).access_token
    const client = connectWs(app.url, { token })
    cleanups.push(async () => void await client.close())
    await client.opened
    const created = await request(app, "POST", "/authors", { token, body: { name: `Prefixed ${randomUUID()}` } })
    expect(created.status).toBe(201)
    const broadcast = await client.broadcasts.take((e) => (e.data as { author?: { id?: number } }).author?.id === (created.body as { id: number }).id)
    expect(broadcast.data).toMatchObject({ event: "author.created" })
    const health = await request(app, "GET", "/health")
    expect({ status: health.status, body: health.body }).toMatchObject({ status: 200, body: { status: "healthy", websocket: { status: "healthy" } } })
    expect(records().filter((r) => String(r["message"]).startsWith("WebSocket session expiry: this instance's timers (Redis refuses SUBSCRIBE"))).toHaveLength(1)
  })

  it("a user allowed no channel at all: websocket unhealthy (no broadcast would reach this instance's clients), 503", async () => {
    const { app } = await appOn(asUser(primary, "deaf", "deaf-pw-9"))
    const health = await request(app, "GET", "/health")
    expect({ status: health.status, body: health.body }).toMatchObject({
      status: 503,
      body: { status: "unhealthy", redis: "healthy", websocket: { status: "unhealthy" } }
    })
  })

  it("an ACL user without write rights (PING answers): unhealthy, 503; one WARN naming Redis's NOPERM", async () => {
    // Its scripts' writes are refused in the script's own words.
    await refusesWrites(asUser(primary, "reader", "reader-pw-9"), /NOPERM|can't run this command/)
  })

  it("an ACL user whose keys are another prefix: unhealthy, 503; one WARN naming Redis's NOPERM", async () => {
    await refusesWrites(asUser(primary, "elsewhere", "elsewhere-pw-9"), /NOPERM/)
  })

  it("a read-only replica: unhealthy, 503; one WARN naming Redis's READONLY", async () => {
    const replica = await startRedisServer(["--dir", dir, "--replicaof", "127.0.0.1", String(primary.port), "--replica-read-only", "yes", "--repl-diskless-load", "on-empty-db"])
    cleanups.push(() => replica.kill("SIGTERM"))
    await refusesWrites(replica.url, /READONLY/)
  })

  it("maxmemory reached with noeviction: unhealthy, 503; one WARN naming Redis's OOM; healthy again, and the outage's end logged, once memory is given", async () => {
    const full = await startRedisServer(["--maxmemory-policy", "noeviction"])
    cleanups.push(() => full.kill("SIGTERM"))
    await admin(full, "CONFIG", "SET", "maxmemory", "1")
    const { app, records } = await refusesWrites(full.url, /OOM/)
    await admin(full, "CONFIG", "SET", "maxmemory", "0")
    await eventually(async () => (await request(app, "GET", "/health")).status === 200, "/health healthy again")
    const ended = await eventually(() => records().find((r) => String(r["message"]).startsWith("Outage ended: Redis")) ?? false, "the outage's end")
    expect(ended).toMatchObject({ level: "INFO", dependency: "redis" })
    expect(ended["failed"]).toBeGreaterThanOrEqual(5)
  })

  it("a service started with a user that may write nothing either runs (/health naming Redis) or its last line is one FATAL line saying why", async () => {
    const service = await startService({
      env: { REDIS_URL: asUser(primary, "reader", "reader-pw-9"), REDIS_KEY_PREFIX: PREFIX },
      seedEmbedded: true,
      ready: "none",
      cleanups
    })
    const outcome = await eventually(async () => {
      if (!service.running()) return "exited" as const
      return (await fetch(`${service.url}/readyz`).catch(() => undefined))?.status === 200 && ("ready" as const)
    }, "the service to be ready or to exit")
    if (outcome === "exited") {
      expect(await service.exited).toBe(1)
      const last = JSON.parse(service.lines().at(-1)!) as Record<string, unknown>
      expect(last).toMatchObject({ level: "FATAL" })
      expect(typeof last["message"]).toBe("string")
    } else {
      const health = await fetch(`${service.url}/health`)
      expect(health.status).toBe(503)
      expect(await health.json()).toMatchObject({ redis: "unhealthy" })
      expect((await service.stop()).code).toBe(0)
    }
    // Every line JSON with a string message; the password nowhere.
    for (const line of service.lines()) expect(typeof (JSON.parse(line) as Record<string, unknown>)["message"], line).toBe("string")
    expect(service.lines().join("\n")).not.toContain("reader-pw-9")
    console.log(`[redis.health] read-only user: the service ${outcome}`)
  })
})
