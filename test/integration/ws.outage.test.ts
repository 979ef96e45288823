/**
 * The WebSocket when Redis goes away (the fail modes of docs/errors-and-limits.md#http-rate-limit applied to
 * docs/websocket.md#limits): RATE_LIMIT_FAIL_MODE
 * decides both the handshake's connection slot and each message's rate check; failures are
 * counted; nothing is a crash, and Redis coming back restores the shared limits.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { describe, expect, it } from "vitest"
import { scrapeMetrics } from "../support/Metrics.ts"
import { eventually } from "../support/Eventually.ts"
import { hostPort, startTcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { request, signToken, startTestApp, TEST_REDIS_URL } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

describe.runIf(TEST_REDIS_URL !== undefined)("WebSocket with Redis cut", () => {
  it.each(["open", "closed"] as const)("RATE_LIMIT_FAIL_MODE=%s decides handshakes and messages; Redis back restores the limits", async (mode) => {
    const { host, port } = hostPort(TEST_REDIS_URL ?? "")
    const proxy = await startTcpProxy(host, port)
    const app = await startTestApp({
      config: {
        rateLimitEnabled: false,
        rateLimitFailMode: mode,
        redis: Option.some(singleRedis(viaProxy(TEST_REDIS_URL ?? "", proxy))),
        redisKeyPrefix: `test-ws-outage-${randomUUID()}:`
      }
    })
    const tokenFor = () => signToken(app, { sub: `outage-${randomUUID()}`, roles: ["get-authors"] })
    try {
      const before = connectWs(app.url, { token: await tokenFor() })
      expect((await before.request(1, {})).status_code).toBe(0)
      // The metrics registry is the process's: count from here.
      const connectionErrors = (await scrapeMetrics(app.url)).firstOrZero("rate_limit_store_errors_total", { limit_type: "websocket_connection" })
      const messageErrors = (await scrapeMetrics(app.url)).firstOrZero("rate_limit_store_errors_total", { limit_type: "websocket_message" })
      await proxy.cut()

      const during = connectWs(app.url, { token: await tokenFor() })
      if (mode === "closed") {
        expect(await during.closed).toEqual({ code: 1013, reason: "Try again later" })
        expect(await before.request(1, {})).toMatchObject({ status_code: 1, data: { msg: "Rate limit exceeded", retry_after: 60 } })
      } else {
        expect((await during.request(1, {})).status_code).toBe(0)
        expect((await before.request(1, {})).status_code).toBe(0)
        await during.close()
      }
      expect((await scrapeMetrics(app.url)).firstOrZero("rate_limit_store_errors_total", { limit_type: "websocket_connection" })).toBe(connectionErrors + 1)
      expect((await scrapeMetrics(app.url)).firstOrZero("rate_limit_store_errors_total", { limit_type: "websocket_message" })).toBeGreaterThanOrEqual(messageErrors + 1)
      const health = await request(app, "GET", "/health")
      expect(health.status).toBe(503)
      expect(health.body).toMatchObject({ redis: "unhealthy", websocket: { status: "unhealthy" } })

      await proxy.restore()
      // Back: new connections are admitted and messages answered (ioredis reconnects on its own).
      await eventually(async () => {
        const client = connectWs(app.url, { token: await tokenFor() })
        const answered = await Promise.race([client.request(1, {}).then((r) => r.status_code === 0), client.closed.then(() => false)])
        client.ws.terminate()
        return answered
      }, "Redis back for the WebSocket")
      expect((await before.request(1, {})).status_code).toBe(0)
      await before.close()
    } finally {
      await app.close()
      await proxy.close()
    }
  })
})
