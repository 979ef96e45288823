/**
 * ADMIN_PORT at the HTTP boundary of the real process: set, `/metrics` and `/api/profiling/*` are
 * served on that port only — on PORT they are unknown routes (404 `{"detail":"Not Found"}`), however
 * the path is spelt — and the admin port serves nothing else but the probes; both listeners bind
 * HOST. Unset, everything is on PORT.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { rawWs } from "../support/RawWs.ts"
import { freePort, type Service, startService } from "../support/Launcher.ts"
import { request, seedEmbeddedDatabase, startTestApp, type TestApp } from "../support/TestApp.ts"

/** A loopback address other than 127.0.0.1 (Linux answers the whole 127/8): a listener bound to HOST is not reachable on 127.0.0.1. */
const HOST = "127.0.0.2"

const answer = async (url: string, init?: RequestInit) => {
  const res = await fetch(url, init)
  const text = await res.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {
    // not JSON: kept as text
  }
  return { status: res.status, contentType: res.headers.get("content-type"), body }
}

const refused = (host: string, port: number) =>
  new Promise<string>((resolve) => {
    const socket = connect(port, host)
    socket.once("connect", () => {
      socket.destroy()
      resolve("connected")
    })
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? String(error)))
  })

describe("ADMIN_PORT set", () => {
  let service: Service
  let dataDir: string
  let api: string
  let admin: string
  let ports: { api: number; admin: number }

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "ads-admin-port-"))
    seedEmbeddedDatabase(dataDir)
    ports = { api: await freePort(), admin: await freePort() }
    api = `http://${HOST}:${ports.api}`
    admin = `http://${HOST}:${ports.admin}`
    service = await startService({
      env: {
        PORT: String(ports.api),
        ADMIN_PORT: String(ports.admin),
        HOST,
        DATA_DIR: dataDir,
        PROFILING_OUTPUT_DIR: join(dataDir, "profiling"),
        LOG_LEVEL: "info"
      }
    })
  })

  afterAll(async () => {
    if (service !== undefined && service.running()) await service.stop()
    if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true })
  })

  it("PORT answers the admin paths 404 {detail: \"Not Found\"}, however they are spelt; the API and the probes are still there", async () => {
    const notFound = { status: 404, contentType: "application/json", body: { detail: "Not Found" } }
    for (const path of ["/metrics", "/METRICS", "//metrics/", "/%6Detrics", "/metrics;x", "/metrics?name[]=x", "/api/profiling/status", "/Api/Profiling/Reports", "/api//profiling/reports/x.html"]) {
      expect(await answer(`${api}${path}`), path).toEqual(notFound)
    }
    // The unauthenticated writes too.
    expect(await answer(`${api}/api/profiling/reports`, { method: "POST", headers: { "content-type": "application/json" }, body: "{\"seconds\":1}" })).toEqual(notFound)
    expect(await answer(`${api}/api/profiling/reports/x.html`, { method: "DELETE" })).toEqual(notFound)
    expect(await answer(`${api}/livez`)).toMatchObject({ status: 200, body: { status: "ok" } })
    expect(await answer(`${api}/readyz`)).toMatchObject({ status: 200, body: { status: "healthy" } })
    expect(await answer(`${api}/authors`)).toMatchObject({ status: 401, body: { detail: "Not authenticated" } })
    expect((await answer(`${api}/openapi.json`)).status).toBe(200)
  })

  it("ADMIN_PORT serves /metrics, /api/profiling/* and the probes; anything else there is 404, a WebSocket upgrade included", async () => {
    const metrics = await answer(`${admin}/metrics`)
    expect(metrics.status).toBe(200)
    expect(metrics.contentType).toMatch(/^text\/plain/)
    // The refusals on PORT above are counted like any unknown route.
    expect(String(metrics.body)).toMatch(/^http_requests_total\{[^}]*endpoint="unmatched"[^}]*status_code="404"[^}]*\} \d+/m)
    expect(await answer(`${admin}/api/profiling/status`)).toMatchObject({ status: 200, body: { enabled: false } })
    expect(await answer(`${admin}/api/profiling/reports`)).toMatchObject({ status: 200 })
    expect(await answer(`${admin}/livez`)).toMatchObject({ status: 200, body: { status: "ok" } })
    expect(await answer(`${admin}/readyz`)).toMatchObject({ status: 200, body: { status: "healthy" } })
    expect(await answer(`${admin}/health`)).toMatchObject({ status: 200, body: { status: "healthy" } })
    for (const path of ["/authors", "/docs", "/openapi.json", "/"]) {
      expect(await answer(`${admin}${path}`), path).toEqual({ status: 404, contentType: "application/json", body: { detail: "Not Found" } })
    }
    expect(await answer(`${admin}/login`, { method: "POST", headers: { "content-type": "application/json" }, body: "{\"username\":\"admin\",\"password\":\"admin\"}" }))
      .toMatchObject({ status: 404, body: { detail: "Not Found" } })
    const ws = rawWs(`ws://${HOST}:${ports.admin}/web`)
    const upgrade = await ws.upgraded
    ws.destroy()
    expect([upgrade.status, JSON.parse(upgrade.body)]).toEqual([404, { detail: "Not Found" }])
  })

  it("both listeners bind HOST (nothing on 127.0.0.1), and say where they are", async () => {
    expect(await refused("127.0.0.1", ports.admin)).toBe("ECONNREFUSED")
    expect(await refused("127.0.0.1", ports.api)).toBe("ECONNREFUSED")
    expect(await refused(HOST, ports.admin)).toBe("connected")
    const messages = service.stdout().split("\n").filter((l) => l.startsWith("{")).map((l) => String((JSON.parse(l) as { message: unknown }).message))
    expect(messages).toContain(`Admin port: /metrics and /api/profiling/* on http://${HOST}:${ports.admin} only`)
    expect(messages).toContain(`Listening on http://${HOST}:${ports.api}`)
  })
})

describe("ADMIN_PORT unset", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp({ config: { profilingEnabled: false } })
  })
  afterAll(() => app?.close())

  it("/metrics and /api/profiling/* are served on PORT, as the docs show", async () => {
    const metrics = await request(app, "GET", "/metrics")
    expect(metrics.status).toBe(200)
    expect(String(metrics.body)).toContain("# TYPE http_requests_total counter")
    expect(await request(app, "GET", "/api/profiling/status")).toMatchObject({ status: 200, body: { enabled: false } })
  })
})
