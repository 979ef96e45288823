/**
 * WebSocket sessions, broadcasts and connection slots across a Redis restart (docs/websocket.md#many-instances). A private, non-persistent `redis-server` forgets every key
 * and the `notify-keyspace-events` setting when it restarts: the instance must put them back on
 * reconnection, and whatever Redis does — restarted, down over a session's end, restarted where
 * CONFIG is not permitted so the expiry events stay off — no connection outlives its session
 * (token exp + WS_SESSION_GRACE_SECONDS). Each case prints its figures, and a summary line ends.
 */
import { Option } from "effect"
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { onPath } from "../support/Binaries.ts"
import { startRedisServer, type RedisServer } from "../support/RedisServer.ts"
import { eventually } from "../support/Eventually.ts"
import { request, signToken, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const GRACE_SECONDS = 1
/** Printed, not tuned against: only a bound far beyond the backstop's slack. */
const LATE_BOUND_MS = 5_000

// A private `redis-server` is started: on a machine with only Node there is none.
describe.runIf(onPath("redis-server"))("WebSocket across a Redis restart", () => {
  let redis: RedisServer
  let app: TestApp
  /** The test's own connection to the private Redis (reconnects like the service's). */
  let probe: Redis
  const prefix = `test-redis-restart-${randomUUID()}:`
  const clients: Array<WsClient> = []
  const figures: Array<string> = []

  const tokenFor = (sub: string, roles: ReadonlyArray<string>, exp?: number) =>
    signToken(app, { sub, preferred_username: sub, roles }, exp !== undefined ? { expiresIn: exp } : {})

  /** Connected and authenticated (a request was answered), or how it was closed. */
  const connect = async (token: string) => {
    const client = connectWs(app.url, { token })
    clients.push(client)
    const outcome = await Promise.race([client.request(1, { filters: { id: -1 } }), client.closed])
    return { client, outcome }
  }
  const connected = async (token: string) => {
    const { client, outcome } = await connect(token)
    expect(outcome).toMatchObject({ status_code: 0 })
    return client
  }

  /** A session ending `seconds` from now (whole seconds, as the token's exp): its token and end. */
  const session = async (seconds: number) => {
    const exp = Math.floor(Date.now() / 1000) + seconds
    const client = await connected(await tokenFor(`session-${randomUUID()}`, ["get-authors"], exp))
    return { client, endMs: (exp + GRACE_SECONDS) * 1000 }
  }

  /** Awaits the close, and how long after the session's end it came. */
  const closedLate = async ({ client, endMs }: { readonly client: WsClient; readonly endMs: number }) => {
    const closed = await client.closed
    return { closed, lateMs: Date.now() - endMs }
  }

  /** A probe's answer, or `fallback` while the probe itself is reconnecting. */
  const ask = <A>(run: () => Promise<A>, fallback: A) => run().catch(() => fallback)
  const subscribers = (channel: string) =>
    ask(async () => Number(((await probe.call("PUBSUB", "NUMSUB", channel)) as [string, number])[1]), -1)
  const expiredEventsOn = () =>
    ask(async () => {
      const flags = ((await probe.config("GET", "notify-keyspace-events")) as Array<string>)[1] ?? ""
      return flags.includes("E") && (flags.includes("x") || flags.includes("A"))
    }, false)

  beforeAll(async () => {
    redis = await startRedisServer()
    probe = new Redis(redis.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 })
    probe.on("error", () => {})
    app = await startTestApp({
      config: {
        redis: Option.some(singleRedis(redis.url)),
        redisKeyPrefix: prefix,
        rateLimitEnabled: false,
        wsSessionGraceSeconds: GRACE_SECONDS,
        wsMaxConnectionsPerUser: 2
      },
      logLevel: "Error"
    })
  })
  afterAll(async () => {
    for (const client of clients) client.ws.terminate()
    await app?.close()
    probe?.disconnect()
    await redis?.kill("SIGTERM")
    console.log(`[redis.restart] summary: ${figures.join("; ")}`)
  })

  it("after a restart: expiry events, subscriptions, slot leases and session keys are back; the session still ends 4001; broadcasts and the per-user limit work", async () => {
    const broadcastChannel = `${prefix}ws:broadcast`
    const expiredChannel = "__keyevent@0__:expired"
    const user = `slots-${randomUUID()}`
    const userToken = await tokenFor(user, ["get-authors"])
    const expiring = await session(6)
    const holder = await connected(userToken) // the user's first slot, held across the restart
    expect(await expiredEventsOn()).toBe(true)
    expect(await subscribers(broadcastChannel)).toBe(1)

    const restartedAt = Date.now()
    await redis.restart()
    const upMs = Date.now() - restartedAt
    // The restarted Redis knows nothing: no keys, no subscribers, expiry events off.
    const since = (from: number) => Date.now() - from
    await eventually(async () => (await subscribers(broadcastChannel)) === 1 && (await subscribers(expiredChannel)) === 1, "the channels resubscribed")
    const resubscribedMs = since(restartedAt)
    await eventually(expiredEventsOn, "notify-keyspace-events re-enabled")
    const eventsMs = since(restartedAt)
    await eventually(async () => (await ask(() => probe.zcard(`${prefix}ws:slots:${user}`), 0)) === 1, "the slot lease written back")
    const slotsMs = since(restartedAt)
    await eventually(async () => (await ask(() => probe.keys(`${prefix}ws:session:*`), [])).length === 2, "the session keys written back")
    const sessionsMs = since(restartedAt)
    expect(Date.now()).toBeLessThan(expiring.endMs) // the session ends after the recovery: Redis's event can end it

    // Per-user limit (2): the slot held across the restart counts again, so the third is refused.
    const second = await connected(userToken)
    const third = await connect(userToken)
    expect(third.outcome).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })

    // A broadcast reaches a client connected after the restart, and the one connected before it.
    const writer = await tokenFor(`writer-${randomUUID()}`, ["create-author"])
    const name = `Restart ${randomUUID()}`
    const created = await request(app, "POST", "/authors", { token: writer, body: { name } })
    expect(created.status).toBe(201)
    for (const client of [second, holder]) {
      const event = await client.broadcasts.take()
      expect(event.data).toMatchObject({ event: "author.created", author: created.body as object })
    }

    const { closed, lateMs } = await closedLate(expiring)
    expect(closed).toEqual({ code: 4001, reason: "Session expired" })
    expect(lateMs).toBeGreaterThanOrEqual(0)
    expect(lateMs).toBeLessThan(LATE_BOUND_MS)
    const line = `restart: redis up ${upMs} ms, resubscribed ${resubscribedMs} ms, events on ${eventsMs} ms, ` +
      `slots ${slotsMs} ms, sessions ${sessionsMs} ms after the kill; session closed ${lateMs} ms after exp+grace`
    console.log(`[redis.restart] ${line}`)
    figures.push(line)
  })

  it("Redis down over the session's end: the instance's own timer closes it 4001", async () => {
    const expiring = await session(3)
    await redis.kill()
    try {
      const { closed, lateMs } = await closedLate(expiring)
      expect(closed).toEqual({ code: 4001, reason: "Session expired" })
      expect(lateMs).toBeGreaterThanOrEqual(0)
      expect(lateMs).toBeLessThan(LATE_BOUND_MS)
      const line = `down: session closed ${lateMs} ms after exp+grace with Redis down`
      console.log(`[redis.restart] ${line}`)
      figures.push(line)
    } finally {
      await redis.start()
    }
  })

  it("restarted where CONFIG is not permitted (expiry events stay off): the instance's own timer closes it 4001", async () => {
    // Back from the previous case: the service is connected and subscribed again.
    await eventually(async () => (await subscribers(`${prefix}ws:broadcast`)) === 1, "the channels resubscribed")
    const expiring = await session(4)
    await redis.restart(["--rename-command", "CONFIG", ""])
    await eventually(async () => (await ask(() => probe.ping(), "")) === "PONG", "the probe reconnected")
    await expect(probe.config("GET", "notify-keyspace-events")).rejects.toThrow(/unknown command/i)
    const { closed, lateMs } = await closedLate(expiring)
    expect(closed).toEqual({ code: 4001, reason: "Session expired" })
    expect(lateMs).toBeGreaterThanOrEqual(0)
    expect(lateMs).toBeLessThan(LATE_BOUND_MS)
    const line = `no CONFIG: session closed ${lateMs} ms after exp+grace without expiry events`
    console.log(`[redis.restart] ${line}`)
    figures.push(line)
  })
})
