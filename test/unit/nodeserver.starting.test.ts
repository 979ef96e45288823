/**
 * docs/operations.md#starting, while the service is starting: the Node server answers before the app's handler is
 * attached (`makeNodeServer()` alone, as `main.ts` has it until the app is ready). `/livez` is
 * alive (200 `{status: "ok"}`), `/health` and `/readyz` are 503 in the health report's shape (never
 * a bare `{detail}`), any other request and a WebSocket upgrade to `/web` are 503
 * `{detail: "Service starting"}`. Once a handler has been attached and detached again (shutdown),
 * the same requests get 503 `{detail: "Service unavailable"}`: the service is not starting any more.
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import WebSocket from "ws"
import { makeNodeServer, type NodeServerShape } from "../../src/Http/NodeServer.ts"
import { STARTING_REPORT } from "../../src/Observability/Api.ts"

/** The health report's shape (docs/operations.md#health-and-probes), every check unhealthy, no connection yet. */
const STARTING_BODY = {
  status: "unhealthy",
  database: "unhealthy",
  redis: "unhealthy",
  websocket: { status: "unhealthy", active_connections: 0 }
}

describe("the Node server before the app's handler is attached (while starting)", () => {
  let node: NodeServerShape
  let base: string

  beforeAll(async () => {
    node = makeNodeServer()
    await new Promise<void>((resolve) => node.server.listen(0, "127.0.0.1", resolve))
    base = `127.0.0.1:${(node.server.address() as AddressInfo).port}`
  })

  afterAll(async () => {
    node.server.closeAllConnections()
    await new Promise((resolve) => node.server.close(resolve))
  })

  const get = async (path: string) => {
    const res = await fetch(`http://${base}${path}`)
    return { status: res.status, contentType: res.headers.get("content-type"), body: (await res.json()) as unknown }
  }

  it("the starting report is the health report's shape", () => {
    expect(STARTING_REPORT).toEqual(STARTING_BODY)
  })

  it.each(["/health", "/readyz", "/health?verbose=1"])("GET %s → 503 with the health report's shape", async (path) => {
    expect(await get(path)).toEqual({ status: 503, contentType: "application/json", body: STARTING_BODY })
  })

  it("GET /livez → 200 {status: \"ok\"}", async () => {
    expect(await get("/livez")).toEqual({ status: 200, contentType: "application/json", body: { status: "ok" } })
  })

  it.each(["/authors", "/metrics", "/"])("GET %s → 503 {detail: \"Service starting\"}", async (path) => {
    expect(await get(path)).toEqual({ status: 503, contentType: "application/json", body: { detail: "Service starting" } })
  })

  it("a WebSocket upgrade to /web → 503 {detail: \"Service starting\"}", async () => {
    expect(await upgrade(base)).toEqual({ status: 503, body: { detail: "Service starting" } })
  })
})

/** A WebSocket upgrade to `/web` that the server refuses: its status and JSON body. */
const upgrade = async (base: string) => {
  const ws = new WebSocket(`ws://${base}/web`)
  const answer = await new Promise<{ status: number | undefined; body: unknown }>((resolve, reject) => {
    ws.on("unexpected-response", (_req, res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => (text += chunk))
      res.on("end", () => resolve({ status: res.statusCode, body: JSON.parse(text) as unknown }))
    })
    ws.on("open", () => reject(new Error("the upgrade was accepted")))
    ws.on("error", reject)
  })
  ws.terminate()
  return answer
}

describe("the Node server after the app's handler is detached (shutdown)", () => {
  let node: NodeServerShape
  let base: string

  beforeAll(async () => {
    node = makeNodeServer()
    const handler = (_req: IncomingMessage, res: ServerResponse) => res.end("app")
    node.server.on("request", handler)
    await new Promise<void>((resolve) => node.server.listen(0, "127.0.0.1", resolve))
    base = `127.0.0.1:${(node.server.address() as AddressInfo).port}`
    expect(await (await fetch(`http://${base}/authors`)).text()).toBe("app")
    node.server.off("request", handler)
  })

  afterAll(async () => {
    node.server.closeAllConnections()
    await new Promise((resolve) => node.server.close(resolve))
  })

  it("GET /authors → 503 {detail: \"Service unavailable\"}; /livez is still 200", async () => {
    const authors = await fetch(`http://${base}/authors`)
    expect([authors.status, await authors.json()]).toEqual([503, { detail: "Service unavailable" }])
    const live = await fetch(`http://${base}/livez`)
    expect([live.status, await live.json()]).toEqual([200, { status: "ok" }])
  })

  it("a WebSocket upgrade to /web → 503 {detail: \"Service unavailable\"}", async () => {
    expect(await upgrade(base)).toEqual({ status: 503, body: { detail: "Service unavailable" } })
  })
})
