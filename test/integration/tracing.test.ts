/**
 * docs/operations.md#tracing: a span per HTTP request (named by route template), SQL statement and Redis command,
 * one trace per request, an incoming W3C `traceparent` continued; OTLP/HTTP export when
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the URL as is) or `OTEL_EXPORTER_OTLP_ENDPOINT` (+ `/v1/traces`)
 * is set, as the OpenTelemetry specification reads them; a server span says only what an
 * allow-list lets it (no credential from a header or the query).
 */
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Option } from "effect"
import { createServer, type IncomingMessage, type Server } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { tracesUrl, layerTracingTo } from "../../src/Observability/Tracing.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { login, request, startTestApp, type TestApp, TEST_REDIS_URL } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
const PARENT_SPAN_ID = "00f067aa0ba902b7"

describe("tracing with an in-memory exporter", () => {
  const exporter = new InMemorySpanExporter()
  const logLines: Array<Record<string, unknown>> = []
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp({
      tracing: layerTracingTo(new SimpleSpanProcessor(exporter)),
      logLevel: "Info",
      logger: layerLoggerTo("json", (line) => logLines.push(JSON.parse(line) as Record<string, unknown>)),
      ...(TEST_REDIS_URL !== undefined
        ? { config: { redis: Option.some(singleRedis(TEST_REDIS_URL)), redisKeyPrefix: `test:${Math.random().toString(36).slice(2)}:` } }
        : {})
    })
  })
  // The exporter is emptied when the SDK shuts down: every assertion reads spans before this.
  afterAll(() => app?.close())

  const spans = () => exporter.getFinishedSpans()
  const traceOf = (traceId: string) => spans().filter((s) => s.spanContext().traceId === traceId)

  it("names the server span by route template and continues the incoming traceparent", async () => {
    const { access_token } = await login(app, "admin")
    const res = await request(app, "GET", "/authors?search=x", {
      token: access_token,
      headers: { traceparent: `00-${TRACE_ID}-${PARENT_SPAN_ID}-01` }
    })
    expect(res.status).toBe(200)
    const server = await eventually(() => defined(traceOf(TRACE_ID).find((s) => s.name === "GET /authors"), "server span"), "server span")
    expect(server.parentSpanContext?.spanId).toBe(PARENT_SPAN_ID)
    // The request's log line carries the ids of its server span.
    const accessLine = logLines.find((l) => l["message"] === "HTTP request" && l["request_id"] === res.headers.get("x-request-id"))
    expect(accessLine).toMatchObject({ trace_id: TRACE_ID, span_id: server.spanContext().spanId })
    expect(server.attributes["http.response.status_code"]).toBe(200)
    // The SQL statements of that request are in the same trace, under the server span.
    const sql = traceOf(TRACE_ID).filter((s) => s.name.startsWith("sql."))
    expect(sql.length).toBeGreaterThan(0)
    expect(sql.every((s) => s.spanContext().traceId === TRACE_ID)).toBe(true)
  })

  it("uses the template for parameterised routes and starts one new trace per request without traceparent", async () => {
    const { access_token } = await login(app, "admin")
    const before = new Set(spans().map((s) => s.spanContext().traceId))
    expect((await request(app, "PUT", "/authors/987654", { token: access_token, body: { name: "nobody" } })).status).toBe(404)
    expect((await request(app, "PUT", "/authors/987655", { token: access_token, body: { name: "nobody" } })).status).toBe(404)
    const servers = await eventually(() => {
      const found = spans().filter((s) => s.name === "PUT /authors/{author_id}")
      expect(found.length).toBeGreaterThanOrEqual(2)
      return found
    }, "two PUT spans")
    const traces = new Set(servers.map((s) => s.spanContext().traceId))
    expect(traces.size).toBe(2)
    for (const t of traces) expect(before.has(t)).toBe(false)
    expect(servers.every((s) => s.parentSpanContext === undefined)).toBe(true)
    // Never the raw path.
    expect(spans().some((s) => s.name.includes("987654"))).toBe(false)
  })

  it("exports only allow-listed request facts: no header credentials, no query value but the API's parameters", async () => {
    const { access_token } = await login(app, "admin")
    const secrets = ["q-secret-1", "p-secret-2", "c-secret-3", "k-secret-4", "a-secret-5"]
    const res = await request(app, "GET", `/authors?access_token=${secrets[0]}&user_password=${secrets[1]}&search=visible`, {
      token: access_token,
      headers: { cookie: `session=${secrets[2]}`, "x-api-key": secrets[3]!, "proxy-authorization": `Basic ${secrets[4]}`, "x-correlation-id": "corr-span-1" }
    })
    expect(res.status).toBe(200)
    const server = await eventually(
      () => defined(spans().find((s) => s.name === "GET /authors" && s.attributes["http.response.header.x-correlation-id"] === "corr-span-1"), "server span"),
      "the server span"
    )
    // The API's own parameter is kept, any other value redacted, in url.query and url.full alike.
    expect(server.attributes["url.query"]).toBe("access_token=REDACTED&user_password=REDACTED&search=visible")
    expect(String(server.attributes["url.full"])).toMatch(/\/authors\?access_token=REDACTED&user_password=REDACTED&search=visible$/)
    // Headers: only the allow-listed ones, in both phases (the response's ids are there to find the trace by).
    expect(server.attributes["http.response.header.x-request-id"]).toBe(res.headers.get("x-request-id"))
    const headers = Object.keys(server.attributes).filter((k) => k.startsWith("http.request.header.") || k.startsWith("http.response.header."))
    const allowed = new Set([
      ...["content-type", "content-length"].map((h) => `http.request.header.${h}`),
      ...["content-type", "content-length", "x-request-id", "x-correlation-id"].map((h) => `http.response.header.${h}`)
    ])
    expect(headers.filter((k) => !allowed.has(k))).toEqual([])

    // A WebSocket URL carries its token in the query (docs/websocket.md#connecting); answered over plain HTTP, it is traced too.
    const web = await request(app, "GET", `/web?Authorization=${encodeURIComponent(`Bearer ${access_token}`)}&token=${access_token}&format=json`, {
      headers: { "x-correlation-id": "corr-span-2" }
    })
    const webSpan = await eventually(
      () => defined(spans().find((s) => s.attributes["http.response.header.x-correlation-id"] === "corr-span-2"), "span"),
      `the span of GET /web (answered ${web.status})`
    )
    expect(webSpan.attributes["url.query"]).toBe("Authorization=REDACTED&token=REDACTED&format=json")

    const exported = JSON.stringify(spans().map((s) => s.attributes))
    for (const secret of [...secrets, access_token, access_token.split(".")[2]!]) expect(exported).not.toContain(secret)
  })

  it("traces each WebSocket message as a ws.message span with pkg_id, its SQL inside", async () => {
    const { access_token } = await login(app, "admin")
    const client = connectWs(app.url, { token: access_token })
    const answer = await client.request(2, { page: 1, per_page: 3 })
    expect(answer.status_code).toBe(0)
    const message = await eventually(
      () => defined(spans().find((s) => s.name === "ws.message" && s.attributes["ws.req_id"] === answer.req_id), "span"),
      "ws.message span"
    )
    expect(message.attributes["pkg_id"]).toBe(2)
    const traceId = message.spanContext().traceId
    const sql = await eventually(() => {
      const found = traceOf(traceId).filter((s) => s.name.startsWith("sql."))
      expect(found.length).toBeGreaterThan(0)
      return found
    }, "SQL spans of the message")
    expect(sql.length).toBeGreaterThan(0)
    await client.close()
  })

  it.runIf(TEST_REDIS_URL !== undefined)("traces Redis commands inside the request's trace", async () => {
    const res = await request(app, "GET", "/health", { headers: { traceparent: `00-${"ab".repeat(16)}-${PARENT_SPAN_ID}-01` } })
    expect(res.status).toBe(200)
    const ping = await eventually(() => defined(traceOf("ab".repeat(16)).find((s) => s.name === "redis PING"), "redis span"), "redis span")
    expect(ping.attributes["db.system"]).toBe("redis")
  })
})

interface Received {
  readonly path: string
  readonly contentType: string
  readonly body: string
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c)).on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
  })

describe("tracing over OTLP/HTTP", () => {
  const received: Array<Received> = []
  let receiver: Server
  let endpoint: string
  beforeAll(async () => {
    receiver = createServer((req, res) => {
      void readBody(req).then((body) => {
        received.push({ path: req.url ?? "", contentType: req.headers["content-type"] ?? "", body })
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", () => r()))
    const address = receiver.address()
    endpoint = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`
  })
  afterAll(() => new Promise<void>((r) => receiver.close(() => r())))

  it("exports nothing when OTEL_EXPORTER_OTLP_ENDPOINT is unset", async () => {
    const app = await startTestApp()
    try {
      expect((await request(app, "GET", "/health")).status).toBe(200)
    } finally {
      await app.close()
    }
    expect(received).toEqual([])
  })

  it("posts the request's spans to <endpoint>/v1/traces (flushed at shutdown at the latest)", async () => {
    const app = await startTestApp({ config: { otelExporterOtlpEndpoint: Option.some(endpoint), otelServiceName: "ads-otlp-test" } })
    try {
      expect((await request(app, "GET", "/authors/paginated")).status).toBe(401)
      expect((await request(app, "GET", "/health")).status).toBe(200)
    } finally {
      await app.close()
    }
    const traces = received.filter((r) => r.path === "/v1/traces")
    expect(traces.length).toBeGreaterThan(0)
    const all = traces.map((t) => t.body).join("\n")
    expect(all).toContain("GET /authors/paginated")
    expect(all).toContain("GET /health")
    expect(all).toContain("ads-otlp-test")
  })

  it("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT alone switches tracing on; its URL is used as is", async () => {
    const app = await startTestApp({ config: { otelExporterOtlpTracesEndpoint: Option.some(`${endpoint}/custom/spans`), otelServiceName: "ads-otlp-traces-test" } })
    try {
      expect((await request(app, "GET", "/authors")).status).toBe(401)
    } finally {
      await app.close()
    }
    const all = received.filter((r) => r.path === "/custom/spans").map((t) => t.body).join("\n")
    expect(all).toContain("GET /authors")
    expect(all).toContain("ads-otlp-traces-test")
    // Not `<it>/v1/traces`: the signal-specific URL is the whole URL.
    expect(received.some((r) => r.path.startsWith("/custom/spans/"))).toBe(false)
  })

  it("with both set, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT wins over OTEL_EXPORTER_OTLP_ENDPOINT", async () => {
    const app = await startTestApp({
      config: {
        otelExporterOtlpTracesEndpoint: Option.some(`${endpoint}/signal/traces`),
        otelExporterOtlpEndpoint: Option.some(`${endpoint}/base`),
        otelServiceName: "ads-otlp-both-test"
      }
    })
    try {
      expect((await request(app, "GET", "/authors")).status).toBe(401)
    } finally {
      await app.close()
    }
    expect(received.filter((r) => r.path === "/signal/traces").map((t) => t.body).join("\n")).toContain("ads-otlp-both-test")
    expect(received.filter((r) => r.path.startsWith("/base"))).toEqual([])
  })
})

describe("tracesUrl (the OpenTelemetry specification's endpoint variables)", () => {
  const url = (traces: string | undefined, base: string | undefined) =>
    Option.getOrUndefined(tracesUrl({ otelExporterOtlpTracesEndpoint: Option.fromUndefinedOr(traces), otelExporterOtlpEndpoint: Option.fromUndefinedOr(base) }))

  it("signal-specific as is; else the base URL + /v1/traces; neither: no tracing", () => {
    expect(url("http://c:4318/x/y", undefined)).toBe("http://c:4318/x/y")
    expect(url("http://c:4318/x/y/", "http://b:4318")).toBe("http://c:4318/x/y/")
    expect(url(undefined, "http://b:4318")).toBe("http://b:4318/v1/traces")
    expect(url(undefined, "http://b:4318/otlp/")).toBe("http://b:4318/otlp/v1/traces")
    expect(url(undefined, undefined)).toBeUndefined()
  })
})
