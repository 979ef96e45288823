/**
 * Golden test of `/metrics` (docs/operations.md#metrics--get-metrics): after a scripted session, every
 * series exists with exactly the documented labels, and the counts match the requests made.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { appVersion } from "../../src/Observability/Metrics.ts"
import { type Metrics, parseMetrics, scrapeMetrics } from "../support/Metrics.ts"
import { eventually } from "../support/Eventually.ts"
import { login, request, signToken, startTestApp, type TestApp, TEST_DATABASE_URL } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"

describe("GET /metrics after a scripted HTTP and WebSocket session", () => {
  let app: TestApp
  let text: string
  let contentType: string | null
  let metrics: Metrics
  let ws: WsClient | undefined
  const UNAUTHENTICATED = 12
  const LIMIT = 10

  beforeAll(async () => {
    // A small budget, so the unauthenticated burst below (keyed by IP) meets the limiter.
    // One app per file (the registry is per process): real PostgreSQL when available, else PGlite.
    app = await startTestApp({
      database: TEST_DATABASE_URL !== undefined ? "postgres" : "embedded",
      config: { rateLimitPerMinute: LIMIT, rateLimitBurst: 0, wsMessageRateLimit: 2, wsMaxConnectionsPerUser: 1 }
    })
    const admin = await login(app, "admin") // IP budget: 1
    expect((await request(app, "POST", "/login", { body: { username: "admin", password: "nope" } })).status).toBe(401) // 2
    const token = admin.access_token
    // Authenticated requests are keyed by the user: 8 of them stay under the budget of 10.
    expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
    expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
    const created = await request(app, "POST", "/authors", { token, body: { name: "Metrics Author" } })
    expect(created.status).toBe(201)
    const id = (created.body as { id: number }).id
    expect((await request(app, "POST", "/authors", { token, body: { name: "Metrics Author" } })).status).toBe(409)
    expect((await request(app, "PUT", `/authors/${id}`, { token, body: { name: "Renamed" } })).status).toBe(200)
    expect((await request(app, "GET", "/authors/paginated?page=1&per_page=5", { token })).status).toBe(200)
    expect((await request(app, "DELETE", `/authors/${id}`, { token })).status).toBe(204)
    expect((await request(app, "DELETE", `/authors/${id}`, { token })).status).toBe(404)
    // An expired token: authentication fails as token_expired.
    const expired = await signToken(app, { sub: "expired-user", roles: ["get-authors"] }, { expiresIn: Math.floor(Date.now() / 1000) - 120 })
    // IP budget: 2 used; 12 more unauthenticated requests → 8 answered 401, then 4 answered 429.
    expect((await request(app, "GET", "/authors", { token: expired })).status).toBe(401) // 3
    for (let i = 0; i < UNAUTHENTICATED - 1; i++) await request(app, "GET", "/authors")
    // WebSocket: one accepted connection answering 2 packages and 1 rate-limited message, one
    // refused over the per-user limit (1), one refused for its token. `ws` stays open.
    ws = connectWs(app.url, { token })
    expect((await ws.request(1, {})).status_code).toBe(0)
    expect((await ws.request(2, { page: 1, per_page: 5 })).status_code).toBe(0)
    expect((await ws.request(1, {})).status_code).toBe(1)
    expect((await connectWs(app.url, { token }).closed).code).toBe(1008)
    expect((await connectWs(app.url, { token: "not-a-jwt" }).closed).code).toBe(4001)
    const scrape = await fetch(`${app.url}/metrics`)
    contentType = scrape.headers.get("content-type")
    text = await scrape.text()
    metrics = parseMetrics(text)
  })
  afterAll(async () => {
    ws?.ws.terminate()
    await app?.close()
  })

  it("is the Prometheus text format", () => {
    expect(contentType).toBe("text/plain; version=0.0.4; charset=utf-8")
    expect(text).not.toContain("_total_total")
  })

  it("declares every documented metric with its kind and exactly its labels", () => {
    const expected: Array<[string, string, Array<string>]> = [
      ["http_requests_total", "counter", ["method", "endpoint", "status_code"]],
      ["http_request_duration_seconds", "histogram", ["method", "endpoint"]],
      ["http_requests_in_progress", "gauge", ["method", "endpoint"]],
      ["ws_connections_active", "gauge", []],
      ["ws_connections_total", "counter", ["status"]],
      ["ws_messages_received_total", "counter", []],
      ["ws_messages_sent_total", "counter", []],
      ["ws_message_processing_duration_seconds", "histogram", ["pkg_id"]],
      ["db_query_duration_seconds", "histogram", ["operation"]],
      ["db_connections_active", "gauge", []],
      ["db_errors_total", "counter", ["operation", "error_type"]],
      ["rate_limit_hits_total", "counter", ["limit_type"]],
      ["auth_attempts_total", "counter", ["status"]],
      ["token_validation_total", "counter", ["status"]],
      ["app_info", "gauge", ["version", "python_version", "environment", "runtime"]]
    ]
    for (const [name, kind, labels] of expected) {
      expect(metrics.types.get(name), name).toBe(kind)
      // The session above records every one of them, so each has series; every series carries
      // exactly the documented labels — none missing, none extra (`le` is the histogram's own).
      const series = metrics.find(kind === "histogram" ? `${name}_count` : name)
      expect(series.length, `${name} series`).toBeGreaterThan(0)
      for (const sample of series) {
        expect(Object.keys(sample.labels).filter((k) => k !== "le").sort(), `${name}${JSON.stringify(sample.labels)}`).toEqual([...labels].sort())
      }
    }
  })

  it("counts HTTP requests by method, route template and status", () => {
    const v = (method: string, endpoint: string, status: number) =>
      metrics.value("http_requests_total", { method, endpoint, status_code: String(status) })
    expect(v("POST", "/login", 200)).toBe(1)
    expect(v("POST", "/login", 401)).toBe(1)
    expect(v("GET", "/authors", 200)).toBe(2)
    expect(v("POST", "/authors", 201)).toBe(1)
    expect(v("POST", "/authors", 409)).toBe(1)
    expect(v("PUT", "/authors/{author_id}", 200)).toBe(1)
    expect(v("GET", "/authors/paginated", 200)).toBe(1)
    expect(v("DELETE", "/authors/{author_id}", 204)).toBe(1)
    expect(v("DELETE", "/authors/{author_id}", 404)).toBe(1)
    expect(v("GET", "/authors", 401)).toBe(LIMIT - 2)
    expect(v("GET", "/authors", 429)).toBe(UNAUTHENTICATED - (LIMIT - 2))
    // Never the raw path.
    expect(metrics.find("http_requests_total").some((s) => /\/authors\/\d/.test(s.labels["endpoint"]!))).toBe(false)
    expect(metrics.value("http_request_duration_seconds_count", { method: "GET", endpoint: "/authors" })).toBe(2 + UNAUTHENTICATED)
    expect(metrics.value("http_request_duration_seconds_sum", { method: "GET", endpoint: "/authors" })).toBeGreaterThan(0)
    expect(metrics.value("http_requests_in_progress", { method: "GET", endpoint: "/authors" })).toBe(0)
    // The scrape itself is in progress while it is rendered.
    expect(metrics.value("http_requests_in_progress", { method: "GET", endpoint: "/metrics" })).toBe(1)
  })

  it("counts WebSocket connections by outcome, frames in and out, processing time by package", () => {
    expect(metrics.value("ws_connections_total", { status: "accepted" })).toBe(1)
    expect(metrics.value("ws_connections_total", { status: "rejected_limit" })).toBe(1)
    expect(metrics.value("ws_connections_total", { status: "rejected_auth" })).toBe(1)
    expect(metrics.value("ws_connections_active")).toBe(1)
    expect(metrics.value("ws_messages_received_total")).toBe(3)
    expect(metrics.value("ws_messages_sent_total")).toBe(3)
    expect(metrics.value("ws_message_processing_duration_seconds_count", { pkg_id: "1" })).toBe(2)
    expect(metrics.value("ws_message_processing_duration_seconds_count", { pkg_id: "2" })).toBe(1)
    expect(metrics.value("rate_limit_hits_total", { limit_type: "websocket_message" })).toBe(1)
    expect(metrics.value("rate_limit_hits_total", { limit_type: "websocket_connection" })).toBe(1)
  })

  it("counts rate-limit hits, authentications and token validations", () => {
    expect(metrics.value("rate_limit_hits_total", { limit_type: "http" })).toBe(UNAUTHENTICATED - (LIMIT - 2))
    expect(metrics.value("auth_attempts_total", { status: "failed" })).toBeGreaterThanOrEqual(1)
    expect(metrics.value("auth_attempts_total", { status: "success" })).toBeGreaterThanOrEqual(9)
    expect(metrics.value("auth_attempts_total", { status: "token_expired" })).toBeGreaterThanOrEqual(1)
    expect(metrics.value("token_validation_total", { status: "valid" })).toBeGreaterThanOrEqual(8)
    expect(metrics.value("token_validation_total", { status: "invalid" })).toBeGreaterThanOrEqual(1)
  })

  it("measures the SQL layer: statements by operation, connections, errors by type", async () => {
    for (const operation of ["select", "insert", "update", "delete"]) {
      expect(metrics.value("db_query_duration_seconds_count", { operation }), operation).toBeGreaterThanOrEqual(1)
    }
    // The duplicate name was refused by the unique constraint.
    expect(metrics.value("db_errors_total", { operation: "insert", error_type: "unique_violation" })).toBe(1)
    // Nothing is checked out between requests — once the audit writer's batch of the last records
    // (written in the background, docs/audit.md#guarantees) has committed.
    await eventually(async () => (await scrapeMetrics(app.url)).value("db_connections_active") === 0, "no connection checked out")
  })

  it("exposes app_info and Node's default process metrics", () => {
    expect(metrics.value("app_info", { version: appVersion, python_version: `node ${process.version}`, environment: "development", runtime: "node" })).toBe(1)
    expect(metrics.types.get("process_cpu_user_seconds_total")).toBe("counter")
    expect(metrics.types.get("nodejs_heap_size_used_bytes")).toBe("gauge")
    expect(metrics.value("process_resident_memory_bytes")).toBeGreaterThan(0)
  })
})
