/**
 * docs/operations.md#redis-failover: a Redis primary killed under load, in a Redis Cluster (a
 * replica takes its slots) and in a Sentinel group (the Sentinels promote the replica), with two
 * instances of the service on it — one with RATE_LIMIT_FAIL_MODE=closed, one with `open`:
 * - meanwhile `/health` reports `redis` unhealthy, and the rate limits follow the fail mode
 *   (429 on the closed instance, answered without a decision on the open one), never a 500;
 * - the service reconnects by itself: `/health` healthy again, decisions from Redis again;
 * - broadcasts reach both instances' clients again (each instance's subscription is back on the
 *   new primary), WebSocket sessions still expire, and connection counts heal (leases the new
 *   primary lost — a replica that lagged — are written back, and the limit still holds).
 *
 * The replacement is held back until the outage has been seen (test/support/RedisFailover.ts): the
 * test waits for events, never for time. Private topologies (test/support/RedisTopology.ts),
 * started from `redis-server`.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, describe, expect, it } from "vitest"
import { onPath } from "../support/Binaries.ts"
import { eventually } from "../support/Eventually.ts"
import { clusterFailover, type Failover, sentinelFailover } from "../support/RedisFailover.ts"
import { connectTo } from "../support/RedisModes.ts"
import { request, signToken, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"

const health = async (app: TestApp) => (await request(app, "GET", "/health")).body as { status: string; redis: string; websocket: { status: string } }

const cleanups: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {})
})

const scenario = (name: string, make: () => Promise<Failover>) =>
  it(`${name}: the primary killed under load — health, fail modes, then reconnection, broadcasts, session expiry and counts`, async () => {
    const failover = await make()
    cleanups.push(failover.stop)
    const prefix = `test-failover-${randomUUID().slice(0, 8)}:`
    const config = (failMode: "open" | "closed") => ({
      config: {
        redis: Option.some(failover.mode.target),
        redisKeyPrefix: prefix,
        rateLimitEnabled: true,
        rateLimitPerMinute: 100_000,
        rateLimitFailMode: failMode,
        wsMaxConnectionsPerUser: 2,
        wsSlotTtlSeconds: 3,
        wsSessionGraceSeconds: 0,
        auditLogEnabled: false
      }
    })
    const closed = await startTestApp(config("closed"))
    cleanups.push(closed.close)
    const open = await startTestApp(config("open"))
    cleanups.push(open.close)
    const apps = [closed, open] as const
    const probe = connectTo(failover.mode)
    cleanups.push(async () => probe.disconnect())

    // A user whose rate-limit window and connection slots live on the primary that is killed, with
    // the broadcast channel (in a cluster: the three keys hash to one primary).
    const channel = `${prefix}ws:broadcast`
    const keysOf = (name: string) => [channel, `${prefix}ratelimit:http:user:${name}`, `${prefix}ws:slots:${name}`]
    let user = "failover-0"
    for (let i = 1; !(await failover.together(keysOf(user))); i++) user = `failover-${i}`
    const tokens = await Promise.all(apps.map((app) => signToken(app, { sub: user, preferred_username: user, roles: ["get-authors", "create-author"] })))
    const readers = await Promise.all(apps.map((app) => signToken(app, { sub: `reader-${randomUUID()}`, preferred_username: "reader", roles: ["get-authors"] })))

    // Before: decisions from Redis on both; the user's two connections fill their limit; a
    // listener on each instance; a session that ends a few seconds from now.
    for (const [i, app] of apps.entries()) {
      const res = await request(app, "GET", "/authors?id=1", { token: tokens[i]! })
      expect(res.status).toBe(200)
      expect(res.headers.get("x-ratelimit-limit")).toBe("100010")
    }
    const clients: Array<WsClient> = []
    const connected = async (app: TestApp, token: string) => {
      const client = connectWs(app.url, { token })
      clients.push(client)
      expect((await client.request(1, { filters: { id: -1 } })).status_code).toBe(0)
      return client
    }
    cleanups.push(async () => clients.forEach((c) => c.ws.terminate()))
    const counted = await Promise.all(apps.map((app, i) => connected(app, tokens[i]!)))
    const listeners = await Promise.all(apps.map((app, i) => connected(app, readers[i]!)))
    const expiring = await connected(open, await signToken(open, { sub: `expiring-${randomUUID()}`, roles: ["get-authors"] }, { expiresIn: "8s" }))

    // Load on both instances throughout: every answer is a 200, or a 429 of the closed instance.
    const statuses: Array<string> = []
    let loading = true
    const load = (async () => {
      while (loading) {
        for (const [i, app] of apps.entries()) {
          const status = await request(app, "GET", "/authors?id=1", { token: tokens[i]! }).then((res) => res.status, (error: unknown) => String(error))
          statuses.push(`${i === 0 ? "closed" : "open"} ${status}`)
        }
      }
    })()
    cleanups.push(async () => {
      loading = false
      await load
    })

    await failover.kill(keysOf(user))

    // Meanwhile: unhealthy, and each instance's fail mode.
    for (const app of apps) await eventually(async () => (await health(app)).redis === "unhealthy", "/health to report redis unhealthy")
    const refused = await eventually(async () => {
      const res = await request(closed, "GET", "/authors?id=1", { token: tokens[0]! })
      return res.status === 429 && res
    }, "the closed instance to refuse while Redis cannot decide")
    expect(refused.body).toEqual({ detail: "Rate limit exceeded" })
    const admitted = await request(open, "GET", "/authors?id=1", { token: tokens[1]! })
    expect(admitted.status).toBe(200)
    expect(admitted.headers.get("x-ratelimit-limit")).toBeNull() // admitted without a decision

    const primary = await failover.release()

    // After: healthy, decisions from Redis again, on both.
    for (const app of apps) {
      await eventually(async () => {
        const report = await health(app)
        return report.status === "healthy" && report.redis === "healthy" && report.websocket.status === "healthy"
      }, "/health to be healthy again")
      await eventually(async () => {
        const res = await request(app, "GET", "/authors?id=1", { token: tokens[apps.indexOf(app)]! })
        return res.status === 200 && res.headers.get("x-ratelimit-limit") === "100010"
      }, "rate-limit decisions from Redis again")
    }
    loading = false
    await load
    expect(statuses.filter((s) => !["closed 200", "closed 429", "open 200"].includes(s)), "only 200s, and 429s of the closed instance").toEqual([])

    // Broadcasts: both instances subscribed on the new primary, then a write reaches both listeners.
    await eventually(async () => (await failover.subscribers(primary, channel)) >= 2, "both instances to subscribe on the new primary")
    const created = await request(closed, "POST", "/authors", { token: tokens[0]!, body: { name: `After failover ${randomUUID()}` } })
    expect(created.status).toBe(201)
    for (const listener of listeners) {
      expect((await listener.broadcasts.take()).data).toMatchObject({ event: "author.created", author: created.body as object })
    }

    // Sessions still expire.
    expect(await expiring.closed).toEqual({ code: 4001, reason: "Session expired" })

    // Counts heal: the new primary lost the user's leases (a replica that lagged), the instances
    // write them back, and the limit holds again.
    const slotsKey = `${prefix}ws:slots:${user}`
    await probe.del(slotsKey)
    await eventually(async () => (await probe.zcard(slotsKey)) === 2, "both leases written back")
    expect(await connectWs(closed.url, { token: tokens[0]! }).closed).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })
    await counted[0]!.close()
    await eventually(async () => (await probe.zcard(slotsKey)) === 1, "the closed connection's lease released")
    await connected(closed, tokens[0]!)
    console.log(`[failover] ${name}: ${statuses.length} requests during the test, ${statuses.filter((s) => s === "closed 429").length} refused by the closed instance meanwhile`)
  })

describe.runIf(onPath("redis-server"))("a Redis failover under load", () => {
  scenario("Redis Cluster", clusterFailover)
  scenario("Sentinel", sentinelFailover)
})
