/**
 * WebSocket session expiry on a Redis that refuses CONFIG, as managed Redis services do (they
 * rename or forbid it, so the service cannot switch key-expiry events on): two instances share a
 * private `redis-server` started with CONFIG renamed away. Sessions still end on time on the
 * instance that holds them — closed 4001 `Session expired` at the token's exp + grace, never
 * before — the other instance's connections are untouched, a re-auth frame still extends a
 * session, and each instance says once, at startup, which mode expires its sessions. Each case
 * prints how late the close came.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { onPath } from "../support/Binaries.ts"
import { type RedisServer, startRedisServer } from "../support/RedisServer.ts"
import { signToken, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const GRACE_SECONDS = 1
/** Printed, not tuned against: only a bound far beyond a timer's slack on a busy machine. */
const LATE_BOUND_MS = 5_000
const TIMERS_MODE = "WebSocket session expiry: this instance's timers (Redis refuses CONFIG"

// A private `redis-server` is started: on a machine with only Node there is none (`.ci/run` installs it).
describe.runIf(onPath("redis-server"))("WebSocket sessions on a Redis that refuses CONFIG", () => {
  let redis: RedisServer
  const instances: Array<{ app: TestApp; lines: Array<string> }> = []
  const clients: Array<WsClient> = []
  const prefix = `test-ws-expiry-managed-${randomUUID()}:`

  beforeAll(async () => {
    redis = await startRedisServer(["--rename-command", "CONFIG", ""])
    for (let i = 0; i < 2; i++) {
      const lines: Array<string> = []
      const app = await startTestApp({
        config: {
          redis: Option.some(singleRedis(redis.url)),
          redisKeyPrefix: prefix,
          rateLimitEnabled: false,
          wsSessionGraceSeconds: GRACE_SECONDS
        },
        logLevel: "Info",
        logger: layerLoggerTo("json", (line) => lines.push(line))
      })
      instances.push({ app, lines })
    }
  })

  afterAll(async () => {
    for (const client of clients) client.ws.terminate()
    for (const { app } of instances) await app.close()
    await redis?.kill("SIGTERM")
  })

  const tokenFor = (app: TestApp, sub: string, expiresIn: string | number) =>
    signToken(app, { sub, preferred_username: sub, roles: ["get-authors"] }, { expiresIn })

  /** Connected and answered once on `app`. */
  const connected = async (app: TestApp, token: string) => {
    const client = connectWs(app.url, { token })
    clients.push(client)
    expect((await client.request(1, { filters: { id: -1 } })).status_code).toBe(0)
    return client
  }

  /** A session ending `seconds` from now (whole seconds, as the token's exp), and its end. */
  const session = async (app: TestApp, seconds: number) => sessionUntil(app, Math.floor(Date.now() / 1000) + seconds)
  /** A session whose token expires at `exp` (seconds since the epoch). */
  const sessionUntil = async (app: TestApp, exp: number) => {
    const sub = `expiry-${randomUUID()}`
    return { client: await connected(app, await tokenFor(app, sub, exp)), sub, exp, endMs: (exp + GRACE_SECONDS) * 1000 }
  }

  it("each instance says once that its sessions expire on its own timers", () => {
    for (const { lines } of instances) {
      const modes = lines.map((l) => JSON.parse(l) as { level: string; message: unknown })
        .filter((l) => String(l.message).startsWith("WebSocket session expiry:"))
      expect(modes).toHaveLength(1)
      expect(modes[0]!.level).toBe("INFO")
      expect(String(modes[0]!.message)).toContain(TIMERS_MODE)
    }
  })

  it("a session ends 4001 Session expired at exp + grace on the instance that holds it; the other instance's connection stays", async () => {
    const [a, b] = [instances[0]!.app, instances[1]!.app]
    const longLived = await connected(a, await tokenFor(a, `long-${randomUUID()}`, "1h"))
    // Ending 3-4 s (+ grace) out: time enough to connect and be answered on a busy machine.
    const expiring = await session(b, 4)
    const closed = await expiring.client.closed
    const lateMs = Date.now() - expiring.endMs
    console.log(`[ws.expiry.managed] session closed ${lateMs} ms after exp+grace (CONFIG refused)`)
    expect(closed).toEqual({ code: 4001, reason: "Session expired" })
    expect(lateMs).toBeGreaterThanOrEqual(0)
    expect(lateMs).toBeLessThan(LATE_BOUND_MS)
    expect((await longLived.request(1, {})).status_code).toBe(0)
  })

  it("a re-auth frame extends the session past its first end; it then ends at the new one", async () => {
    const app = instances[0]!.app
    const short = await session(app, 4)
    const exp = short.exp + 3
    short.client.send({ type: "auth", token: `Bearer ${await tokenFor(app, short.sub, exp)}` })
    expect(await short.client.others.take()).toEqual({ type: "auth_ok" })
    // A control session with the first end: once it is closed, that end has passed (an event, not
    // a sleep), and the re-authenticated connection must still be open.
    const control = await sessionUntil(app, short.exp)
    expect(await control.client.closed).toEqual({ code: 4001, reason: "Session expired" })
    expect((await short.client.request(1, {})).status_code).toBe(0)
    const closed = await short.client.closed
    const lateMs = Date.now() - (exp + GRACE_SECONDS) * 1000
    console.log(`[ws.expiry.managed] extended session closed ${lateMs} ms after its new exp+grace`)
    expect(closed).toEqual({ code: 4001, reason: "Session expired" })
    expect(lateMs).toBeGreaterThanOrEqual(0)
    expect(lateMs).toBeLessThan(LATE_BOUND_MS)
  })
})
