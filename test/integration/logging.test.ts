/**
 * docs/operations.md#logs: one JSON line per event with level, message, correlation id and trace id (and the
 * user id once known); no password or token ever appears in a log line.
 */
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Cause, Effect, Layer } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { USER_AGENT_LOG_MAX_BYTES } from "../../src/Http/AccessLog.ts"
import { layerLoggerTo, scrub, scrubText } from "../../src/Observability/Logging.ts"
import { RedisError } from "../../src/Store/Redis.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { request, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"

const PASSWORD = "Corr3ct-H0rse-Battery-Staple"
const WRONG_PASSWORD = "Wr0ng-Passw0rd-Never-Logged"
const USER_ID = "5d0c4c55-1f0b-4a43-9a52-7c1b0b7a0001"

describe("structured logs", () => {
  const lines: Array<string> = []
  let app: TestApp
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), "ads-logging-"))
    const usersFile = join(dir, "users.json")
    writeFileSync(usersFile, JSON.stringify([{ username: "logger", password: PASSWORD, roles: ["get-authors"], id: USER_ID }]))
    app = await startTestApp({
      config: { authUsersFile: usersFile },
      logLevel: "Debug",
      logger: layerLoggerTo("json", (line) => lines.push(line))
    })
  })
  afterAll(() => app?.close())

  const records = () => lines.map((l) => JSON.parse(l) as Record<string, unknown>)

  it("logs a login, a failed login and an authenticated request as JSON lines without any secret", async () => {
    const ok = await request(app, "POST", "/login", { body: { username: "logger", password: PASSWORD }, headers: { "x-correlation-id": "corr-login-1" } })
    expect(ok.status).toBe(200)
    const { access_token, refresh_token } = ok.body as { access_token: string; refresh_token: string }
    const failed = await request(app, "POST", "/login", { body: { username: "logger", password: WRONG_PASSWORD }, headers: { "x-correlation-id": "corr-login-2" } })
    expect(failed.status).toBe(401)
    const listed = await request(app, "GET", "/authors", { token: access_token, headers: { "x-correlation-id": "corr-list-3", "user-agent": "logging-test/1.0" } })
    expect(listed.status).toBe(200)
    const CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
    const traced = await request(app, "GET", "/authors", {
      token: access_token,
      headers: { "x-correlation-id": "corr-traced-4", traceparent: `00-${CALLER_TRACE}-00f067aa0ba902b7-01` }
    })
    expect(traced.status).toBe(200)
    const refreshed = await request(app, "POST", "/login/refresh", { body: { refresh_token } })
    expect(refreshed.status).toBe(200)
    const bad = await request(app, "GET", "/authors", { token: `${access_token}x` })
    expect(bad.status).toBe(401)

    // Every line is one JSON object with a level and a message.
    const all = records()
    expect(all.length).toBeGreaterThanOrEqual(5)
    for (const r of all) {
      expect(typeof r["level"]).toBe("string")
      expect(typeof r["message"]).toBe("string")
      expect(typeof r["timestamp"]).toBe("string")
    }

    const byCorrelation = (id: string) => all.filter((r) => r["correlation_id"] === id)
    const login = byCorrelation("corr-login-1")
    expect(login.length).toBeGreaterThan(0)
    expect(login[0]).toMatchObject({ level: "INFO", message: "HTTP request", endpoint: "/login", status_code: 200 })
    expect(login[0]!["trace_id"]).toMatch(/^[0-9a-f]{32}$/)
    expect(byCorrelation("corr-login-2")[0]).toMatchObject({ status_code: 401 })
    const list = byCorrelation("corr-list-3")[0]
    expect(list).toMatchObject({ endpoint: "/authors", status_code: 200, user_id: USER_ID, client_ip: "127.0.0.1", user_agent: "logging-test/1.0" })
    expect(list!["request_id"]).toMatch(/^[0-9a-f-]{36}$/)
    // Tracing off (no exporter): no span is made, and the trace id is the request's own — the
    // request id's hex digits, or the caller's when it sent a W3C traceparent.
    expect(list!["trace_id"]).toBe(String(list!["request_id"]).replaceAll("-", ""))
    expect(list!["span_id"]).toBeUndefined()
    expect(byCorrelation("corr-traced-4")[0]).toMatchObject({ trace_id: CALLER_TRACE, status_code: 200 })

    // No secret anywhere in the log output.
    const text = lines.join("\n")
    for (const secret of [PASSWORD, WRONG_PASSWORD, access_token, refresh_token, (refreshed.body as { access_token: string }).access_token]) {
      expect(text).not.toContain(secret)
    }
    // Not even a token's signature alone.
    expect(text).not.toContain(access_token.split(".")[2]!)
  })

  /** Resolves once a logged line satisfies `matches` (the logger writes after the event it reports). */
  const lineWhere = (matches: (r: Record<string, unknown>) => boolean) =>
    eventually(() => defined(records().find(matches), "such log line"), "the log line")

  it("the access line carries the client's address and user agent, a long one cut at USER_AGENT_LOG_MAX_BYTES", async () => {
    const long = `huge-agent/${"é".repeat(4000)}`
    const res = await request(app, "GET", "/livez", { headers: { "x-correlation-id": "corr-agent-5", "user-agent": long } })
    expect(res.status).toBe(200)
    const line = await lineWhere((r) => r["correlation_id"] === "corr-agent-5" && r["message"] === "HTTP request")
    expect(line).toMatchObject({ level: "DEBUG", endpoint: "/livez", client_ip: "127.0.0.1" })
    const agent = String(line["user_agent"])
    expect(Buffer.byteLength(agent, "utf8")).toBeLessThanOrEqual(USER_AGENT_LOG_MAX_BYTES)
    expect(agent.startsWith("huge-agent/éé")).toBe(true)
    expect(agent.endsWith("…")).toBe(true)
    expect(agent).not.toContain("\ufffd")
  })

  it("a WebSocket connection's lines carry its trace id: the upgrade's traceparent, else the connection's own", async () => {
    const login = await request(app, "POST", "/login", { body: { username: "logger", password: PASSWORD } })
    const { access_token } = login.body as { access_token: string }
    const CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
    const plain = connectWs(app.url, { token: access_token, headers: { "x-correlation-id": "corr-ws-5" } })
    const traced = connectWs(app.url, {
      token: access_token,
      headers: { "x-correlation-id": "corr-ws-6", traceparent: `00-${CALLER_TRACE}-b7ad6b7169203331-01` }
    })
    expect((await plain.request(2, { page: 1, per_page: 5 })).status_code).toBe(0)
    expect((await traced.request(2, { page: 1, per_page: 5 })).status_code).toBe(0)
    await plain.close()
    await traced.close()

    const connected = await lineWhere((r) => r["correlation_id"] === "corr-ws-5" && r["message"] === "WebSocket connected")
    const closed = await lineWhere((r) => r["correlation_id"] === "corr-ws-5" && r["message"] === "WebSocket closed")
    expect(connected["trace_id"]).toMatch(/^[0-9a-f]{32}$/)
    expect(closed["trace_id"]).toBe(connected["trace_id"])
    expect(connected["trace_id"]).toBe(String(connected["connection_id"]).replaceAll("-", ""))
    expect(connected["span_id"]).toBeUndefined()
    const callerLine = await lineWhere((r) => r["correlation_id"] === "corr-ws-6" && r["message"] === "WebSocket connected")
    expect(callerLine["trace_id"]).toBe(CALLER_TRACE)
  })
})

describe("every line is one JSON object whose message is a string", () => {
  /** The JSON lines `effect` logs, parsed. */
  const logged = async (effect: Effect.Effect<void>) => {
    const lines: Array<string> = []
    await Effect.runPromise(effect.pipe(Effect.provide(layerLoggerTo("json", (line) => lines.push(line)))))
    for (const line of lines) expect(line.includes("\n"), line).toBe(false)
    return lines.map((line) => JSON.parse(line) as Record<string, unknown>)
  }
  const reply = Object.assign(new Error("NOPERM this user has no permissions to access one of the keys used as arguments"), { name: "ReplyError" })

  it("a message logged with an error: the message is the text, the error's own words (its causes') are the cause", async () => {
    const [line] = await logged(Effect.logWarning("Audit stream recovery scan failed; retrying", new RedisError({ command: "XRANGE", cause: reply })))
    expect(line).toMatchObject({ level: "WARN", message: "Audit stream recovery scan failed; retrying" })
    expect(line!["cause"]).toBe("Redis XRANGE failed: NOPERM this user has no permissions to access one of the keys used as arguments")
  })

  it("an expected failure's Cause is its messages on one line; a defect keeps its stack; nothing logged but a Cause still has a message", async () => {
    const [failed, died, bare] = await logged(Effect.gen(function*() {
      yield* Effect.logWarning("Profiling capture failed", Cause.fail(new Error("inspector busy", { cause: new Error("session closed") })))
      yield* Effect.logError("Unhandled error", Cause.die(new TypeError("x is not a function")))
      yield* Effect.logError(Cause.fail(new Error("the database is gone")))
    }))
    expect(failed).toMatchObject({ message: "Profiling capture failed", cause: "inspector busy: session closed" })
    expect(died).toMatchObject({ level: "ERROR", message: "Unhandled error" })
    expect(String(died!["cause"])).toMatch(/^TypeError: x is not a function\n\s+at /)
    expect(bare).toMatchObject({ message: "the database is gone", cause: "the database is gone" })
  })

  it("no password of a URL, token or bearer credential reaches a line, in the message or the cause", async () => {
    const jwt = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    const lines = await logged(Effect.logWarning(
      "connect to postgres://authors:s3cret-pw@db:5432/authors failed",
      new Error(`redis://:r3dis-pw@cache:6379/0 refused ${jwt}`)
    ).pipe(Effect.andThen(Effect.logInfo("plain", { url: "redis://user:an0ther-pw@cache:6379" }))))
    const text = JSON.stringify(lines)
    for (const secret of ["s3cret-pw", "r3dis-pw", "an0ther-pw", jwt]) expect(text).not.toContain(secret)
    expect(lines[0]).toMatchObject({
      message: "connect to postgres://authors:[REDACTED]@db:5432/authors failed",
      cause: "redis://:[REDACTED]@cache:6379/0 refused [REDACTED]"
    })
    for (const line of lines) expect(typeof line["message"]).toBe("string")
  })

  it("the pretty lines carry the same message and cause", async () => {
    const lines: Array<string> = []
    await Effect.runPromise(Effect.logWarning("Audit batch not written", new Error("Connection terminated")).pipe(
      Effect.provide(Layer.mergeAll(layerLoggerTo("pretty", (line) => lines.push(line))))
    ))
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^\[[^\]]+\] WARN {2}Audit batch not written\nConnection terminated$/)
  })
})

describe("scrubbing (a last line of defence)", () => {
  it("redacts sensitive keys, JWT-shaped strings and bearer credentials", () => {
    const jwt = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    expect(scrubText(`token ${jwt} here`)).toBe("token [REDACTED] here")
    expect(scrubText("Authorization: Bearer abc.def-ghi")).toBe("Authorization: Bearer [REDACTED]")
    expect(scrub({ user: "u", password: "p", nested: { client_secret: "s", list: [jwt] } })).toEqual({
      user: "u",
      password: "[REDACTED]",
      nested: { client_secret: "[REDACTED]", list: ["[REDACTED]"] }
    })
    // Every name the audit redacts from its data is redacted from logs too, in any spelling.
    expect(scrub({ cvv2: "123", creditCardNumber: "4111", SSN: "078-05-1120", "X-Api-Key": "k", endpoint: "/authors" })).toEqual({
      cvv2: "[REDACTED]",
      creditCardNumber: "[REDACTED]",
      SSN: "[REDACTED]",
      "X-Api-Key": "[REDACTED]",
      endpoint: "/authors"
    })
  })
})
