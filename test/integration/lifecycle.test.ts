/**
 * Lifecycle (docs/operations.md#shutdown): on SIGTERM/SIGINT the real service stops
 * accepting connections, finishes the request in flight, closes its pools and exits 0.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { request as httpRequest, type ClientRequest, type IncomingMessage } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { parseMetrics } from "../support/Metrics.ts"
import { type Service, startService } from "../support/Launcher.ts"
import { eventually } from "../support/Eventually.ts"
import { login } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"

const root = mkdtempSync(join(tmpdir(), "ads-lifecycle-"))
const children: Array<Service> = []
afterAll(async () => {
  for (const c of children) await c.dispose()
  rmSync(root, { recursive: true, force: true })
})

/** One request on its own connection (no keep-alive pool), resolving with status and body. */
const get = (port: number, path: string) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port, path, agent: false }, (res) => {
      let body = ""
      res.on("data", (d: Buffer) => (body += d.toString()))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on("error", reject)
    req.end()
  })

const refused = (port: number) => get(port, "/health").then(() => false, (e: NodeJS.ErrnoException) => e.code === "ECONNREFUSED")

const start = async (name: string) => {
  const service = await startService({ env: { DATA_DIR: join(root, name), RATE_LIMIT_ENABLED: "false" }, ready: "none" })
  children.push(service)
  const port = service.port
  // While it starts, the port either refuses (before it opened) or answers — never hangs: /health
  // and /readyz 503 with the health report's shape, /livez 200, anything else 503
  // `Service starting` (docs/operations.md#starting). The port opens before the embedded database starts.
  const early: Array<{ path: string; status: number; body: string }> = []
  await eventually(async () => {
    for (const path of ["/livez", "/readyz", "/authors"]) {
      const res = await get(port, path).catch(() => ({ status: 0, body: "" }))
      if (res.status === 503 || (path === "/livez" && res.status !== 0)) early.push({ path, ...res })
    }
    const res = await get(port, "/health").catch(() => ({ status: 0, body: "" }))
    if (res.status !== 0 && res.status !== 200) early.push({ path: "/health", ...res })
    return res.status === 200
  }, "the service to be healthy")
  const starting = JSON.stringify({ status: "unhealthy", database: "unhealthy", redis: "unhealthy", websocket: { status: "unhealthy", active_connections: 0 } })
  const expected: Record<string, { status: number; body: string }> = {
    "/livez": { status: 200, body: JSON.stringify({ status: "ok" }) },
    "/health": { status: 503, body: starting },
    "/readyz": { status: 503, body: starting },
    "/authors": { status: 503, body: JSON.stringify({ detail: "Service starting" }) }
  }
  for (const { path, ...res } of early) expect({ path, ...res }).toEqual({ path, ...expected[path] })
  return { port, service }
}

/** A POST /login whose body is sent in two parts, so it stays in flight until `finish`. */
const slowLogin = (port: number) => {
  const body = JSON.stringify({ username: "admin", password: "admin" })
  let req: ClientRequest | undefined
  const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req = httpRequest({
      host: "127.0.0.1",
      port,
      path: "/login",
      method: "POST",
      agent: false,
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) }
    }, (res: IncomingMessage) => {
      let text = ""
      res.on("data", (d: Buffer) => (text += d.toString()))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }))
    })
    req.on("error", reject)
    req.write(body.slice(0, 10))
  })
  return { response, finish: () => req?.end(body.slice(10)) }
}

const inFlightLogins = async (port: number) =>
  parseMetrics((await get(port, "/metrics")).body).firstOrZero("http_requests_in_progress", { endpoint: "/login" })

describe.each(["SIGTERM", "SIGINT"] as const)("graceful shutdown on %s", (signal) => {
  it("stops accepting, closes WebSockets 1001, completes the request in flight, exits 0; logs are JSON lines only", async () => {
    const { port, service } = await start(signal)
    const token = (await login({ url: `http://127.0.0.1:${port}` }, "reader")).access_token
    const ws = connectWs(`http://127.0.0.1:${port}`, { token })
    expect((await ws.request(1, {})).status_code).toBe(0)
    const inFlight = slowLogin(port)
    await eventually(async () => (await inFlightLogins(port)) === 1, "the login to be in flight")

    service.child.kill(signal)
    expect(await ws.closed).toEqual({ code: 1001, reason: "Server shutting down" })
    await eventually(() => refused(port), "the listener to close")
    expect(service.child.exitCode).toBeNull() // still finishing the request in flight

    inFlight.finish()
    const res = await inFlight.response
    expect(res.status).toBe(200)
    expect(JSON.parse(res.body)).toHaveProperty("access_token")
    expect(await service.exited).toBe(0)
    // LOG_FORMAT=json: every line is one JSON object (no second, pretty logger).
    const lines = service.stdout().split("\n").filter((l) => l.trim() !== "")
    expect(lines.length).toBeGreaterThan(0)
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow()
  })
})
