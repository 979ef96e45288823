/**
 * The log of a session with a PostgreSQL outage in it, read line by line (docs/operations.md#logs,
 * docs/operations.md#outages): the service as a child process, its database behind a TCP proxy
 * that is cut while requests run and restored. Every line — stdout and stderr, start to exit — is
 * one JSON object whose `message` is a string; the outage is exactly one WARN line when it begins
 * (the database's own words in `cause`) and one INFO line when it ends (how long, how many requests
 * failed meanwhile: every 500 of the outage), not an ERROR with a stack trace per failed request;
 * and the password of DATABASE_URL appears nowhere.
 */
import { afterEach, describe, expect, it } from "vitest"
import { proxiedDatabase } from "../support/DatabaseServer.ts"
import { eventually } from "../support/Eventually.ts"
import { byStatus, startLoad } from "../support/Faults.ts"
import { type Cleanups, runCleanups, startService } from "../support/Launcher.ts"
import { viaProxy } from "../support/TcpProxy.ts"
import { login, TEST_DATABASE_URL } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"

const cleanups: Cleanups = []
afterEach(() => runCleanups(cleanups))

/** A password in DATABASE_URL (the test server trusts loopback, so any password is accepted and none is needed). */
const PASSWORD = "Db-Pa55word-Never-Logged"

describe.runIf(TEST_DATABASE_URL !== undefined)("the log through a PostgreSQL outage", () => {
  it("every line is one JSON object with a string message; one WARN when the outage begins, one INFO with its counts when it ends; no stack per request; no password", async () => {
    const { db, proxy } = await proxiedDatabase(cleanups)
    const url = new URL(viaProxy(db.url!, proxy))
    url.password = PASSWORD
    const service = await startService({ env: { RATE_LIMIT_ENABLED: "false", WS_MESSAGE_RATE_LIMIT: "1000000", DATABASE_URL: url.toString() }, cleanups })
    const token = (await login(service, "admin")).access_token
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" }
    const load = startLoad(
      (n) =>
        n % 3 === 0
          ? fetch(`${service.url}/authors`, { method: "POST", headers, body: JSON.stringify({ name: `Logged outage ${n}` }) })
          : fetch(`${service.url}/authors/paginated?page=1&per_page=5`, { headers }),
      { workers: 3, paceMs: 20 }
    )
    // A WebSocket client asking for a page, one request after the other (paced like the load), until stopped.
    const ws = connectWs(service.url, { token })
    const wsStatuses: Array<number> = []
    let wsStopped = false
    const wsLoop = (async () => {
      for (let n = 0; !wsStopped; n++) {
        wsStatuses.push((await ws.request(2, { page: 1, per_page: 5, filters: { search_term: `ws-${n}` } })).status_code)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    })()
    const records = () => service.logLines()
    const outageLines = (word: "began" | "ended") =>
      records().filter((r) => typeof r["message"] === "string" && r["message"].startsWith(`Outage ${word}: the database`))
    try {
      await eventually(() => load.answers.filter((a) => a.status === 200).length >= 10, "requests answered before the outage")
      await proxy.cut()
      await eventually(
        () => load.answers.filter((a) => a.status === 500).length >= 10 && wsStatuses.includes(1) && outageLines("began").length > 0,
        "requests failing in the outage"
      )
      await proxy.restore()
      await eventually(() => outageLines("ended").length > 0, "the outage's end in the log")
      const ended = load.answers.length
      await eventually(() => load.answers.slice(ended).filter((a) => a.status === 201).length >= 3, "writes answered after the outage")
    } finally {
      await load.stop()
      wsStopped = true
      await wsLoop
      await ws.close()
    }
    const answers = load.answers
    const { code } = await service.stop()
    expect(code).toBe(0)
    console.log(`[fault] logged outage: ${answers.length} requests (${byStatus(answers)}), ${service.lines().length} log lines`)

    // Every line of the session, stdout and stderr, start to exit.
    for (const line of service.lines()) {
      const parsed: unknown = JSON.parse(line)
      expect(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed), line).toBe(true)
      expect(typeof (parsed as Record<string, unknown>)["message"], line).toBe("string")
    }
    const all = records()
    expect(all.length).toBe(service.lines().length)

    const began = outageLines("began")
    const endedLines = outageLines("ended")
    expect(began).toHaveLength(1)
    expect(endedLines).toHaveLength(1)
    expect(began[0]).toMatchObject({ level: "WARN", dependency: "database" })
    expect(began[0]!["cause"]).toMatch(/\S/)
    expect(endedLines[0]).toMatchObject({ level: "INFO", dependency: "database" })
    expect(endedLines[0]!["duration_ms"]).toBeGreaterThan(0)
    // Counted: each request the outage failed (answered 500, or status_code 1 on the WebSocket), and nothing else.
    const failedRequests = answers.filter((a) => a.status === 500)
    expect(failedRequests.length).toBeGreaterThan(0)
    for (const a of failedRequests) expect(a.body).toEqual({ detail: "Internal server error" })
    expect(new Set(wsStatuses)).toEqual(new Set([0, 1]))
    expect(endedLines[0]!["failed"]).toBe(failedRequests.length + wsStatuses.filter((c) => c === 1).length)
    const at = (word: string) => all.findIndex((r) => String(r["message"]).startsWith(`Outage ${word}: the database`))
    expect(at("began")).toBeLessThan(at("ended"))
    console.log(`[fault] logged outage: ${JSON.stringify(began[0])}\n${JSON.stringify(endedLines[0])}`)

    // No ERROR with a stack per failed request; nothing at ERROR at all in this session.
    expect(all.filter((r) => r["message"] === "Unhandled error")).toEqual([])
    expect(all.filter((r) => r["level"] === "ERROR" || r["level"] === "FATAL")).toEqual([])
    // The password of DATABASE_URL appears nowhere.
    expect(service.lines().join("\n")).not.toContain(PASSWORD)
  })
})
