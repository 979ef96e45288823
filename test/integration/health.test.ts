/**
 * docs/operations.md#health-and-probes: `/health` checks database, cache store and WebSocket subsystem in parallel, each
 * bounded by 1 s; 200 when all are healthy, 503 with the same shape when any is not.
 */
import { Option, Redacted } from "effect"
import { createServer } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type AuditItem, awaitAuditRecord } from "../support/AuditTrail.ts"
import { eventually } from "../support/Eventually.ts"
import { hostPort, startTcpProxy, type TcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { createPostgresDatabase, login, request, startTestApp, type TestApp, type TestDatabase, TEST_DATABASE_URL, TEST_REDIS_URL } from "../support/TestApp.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const healthy = { status: "healthy", database: "healthy", redis: "healthy", websocket: { status: "healthy", active_connections: 0 } }

/** A loopback port nothing listens on. */
const closedPort = async () => {
  const server = createServer()
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  const address = server.address()
  const port = typeof address === "object" && address !== null ? address.port : 0
  await new Promise<void>((r) => server.close(() => r()))
  return port
}

const pollHealth = (app: TestApp, status: number) =>
  eventually(async () => {
    const res = await request(app, "GET", "/health")
    expect(res.status).toBe(status)
    return res
  }, `/health to answer ${status}`)

describe("health with embedded dependencies", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp()
  })
  afterAll(() => app?.close())

  it("is 200 and healthy, without authentication and without rate-limit headers", async () => {
    const res = await request(app, "GET", "/health")
    expect(res.status).toBe(200)
    expect(res.body).toEqual(healthy)
    expect(res.headers.get("x-ratelimit-limit")).toBeNull()
  })

  it("/livez is 200 {status: ok} and /readyz 200 with the health report; neither limited nor audited", async () => {
    const live = await request(app, "GET", "/livez")
    expect({ status: live.status, body: live.body }).toEqual({ status: 200, body: { status: "ok" } })
    const ready = await request(app, "GET", "/readyz")
    expect({ status: ready.status, body: ready.body }).toEqual({ status: 200, body: healthy })
    for (const res of [live, ready]) expect(res.headers.get("x-ratelimit-limit")).toBeNull()
  })

  it("/livez and /readyz are not audited, even with a token: the trail moves past them without a record", async () => {
    const admin = (await login(app, "admin")).access_token
    const probes = [await request(app, "GET", "/livez", { token: admin }), await request(app, "GET", "/readyz", { token: admin })]
    expect(probes.map((p) => p.status)).toEqual([200, 200])
    const probeIds = probes.map((p) => p.headers.get("x-request-id"))
    for (const id of probeIds) expect(id).toMatch(/\S/)
    // An audited request after them: once its record is stored, theirs would be too.
    const marker = await request(app, "GET", "/authors", { token: admin })
    expect(marker.status).toBe(200)
    await awaitAuditRecord(app, admin, marker.headers.get("x-request-id")!)
    const trail = await request(app, "GET", "/audit-logs?per_page=100", { token: admin })
    const items = (trail.body as { items: Array<AuditItem> }).items
    expect(items.filter((i) => probeIds.includes(i.request_id) || i.resource === "/livez" || i.resource === "/readyz")).toEqual([])
  })
})

describe("health with Redis unreachable", () => {
  let app: TestApp
  beforeAll(async () => {
    const port = await closedPort()
    app = await startTestApp({
      config: { redis: Option.some(singleRedis(`redis://127.0.0.1:${port}/0`)), redisKeyPrefix: `test:${Math.random().toString(36).slice(2)}:` }
    })
  })
  afterAll(() => app?.close())

  it("is 503 with the same shape, naming the cache store", async () => {
    const res = await request(app, "GET", "/health")
    expect(res.status).toBe(503)
    // docs/operations.md#health-and-probes: the connection registry's store (Redis) is unreachable too.
    expect(res.body).toEqual({ status: "unhealthy", database: "healthy", redis: "unhealthy", websocket: { status: "unhealthy", active_connections: 0 } })
  })

  it("stays live and ready: the instance serves per RATE_LIMIT_FAIL_MODE without Redis", async () => {
    expect((await request(app, "GET", "/livez")).status).toBe(200)
    const ready = await request(app, "GET", "/readyz")
    expect(ready.status).toBe(200)
    expect(ready.body).toMatchObject({ status: "unhealthy", database: "healthy", redis: "unhealthy", websocket: { status: "unhealthy" } })
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("health with PostgreSQL cut off", () => {
  let app: TestApp
  let proxy: TcpProxy
  let database: TestDatabase
  beforeAll(async () => {
    database = await createPostgresDatabase(TEST_DATABASE_URL!)
    const target = hostPort(database.url!)
    proxy = await startTcpProxy(target.host, target.port)
    app = await startTestApp({
      config: {
        databaseUrl: Option.some(Redacted.make(viaProxy(database.url!, proxy))),
        ...(TEST_REDIS_URL !== undefined
          ? { redis: Option.some(singleRedis(TEST_REDIS_URL)), redisKeyPrefix: `test:${Math.random().toString(36).slice(2)}:` }
          : {})
      }
    })
  })
  afterAll(async () => {
    await app?.close()
    await proxy?.close()
    await database?.dispose()
  })

  it("goes 200 → 503 (database unhealthy) when the database is cut → 200 when it is back", async () => {
    const before = await request(app, "GET", "/health")
    expect(before.status).toBe(200)
    expect(before.body).toEqual(healthy)

    await proxy.cut()
    const down = await pollHealth(app, 503)
    expect(down.status).toBe(503)
    expect(down.body).toEqual({ ...healthy, status: "unhealthy", database: "unhealthy" })
    // Not ready, but alive: a database outage must not get the instance restarted.
    const unready = await request(app, "GET", "/readyz")
    expect({ status: unready.status, body: unready.body }).toEqual({ status: 503, body: down.body })
    expect((await request(app, "GET", "/livez")).status).toBe(200)

    await proxy.restore()
    const up = await pollHealth(app, 200)
    expect(up.status).toBe(200)
    expect(up.body).toEqual(healthy)
  })
})
