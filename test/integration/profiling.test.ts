/**
 * Profiling (docs/operations.md#profiling): status, on-demand and continuous reports,
 * listing, serving and deleting with strict filename checks (traversal, encoded or raw, names over
 * 255 bytes, and symlinks escaping the directory); captures refused while disabled, and one capture
 * sampling at a time (a second on-demand one is refused, the interval one is waited for).
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, symlinkSync, utimesSync, writeFileSync } from "node:fs"
import { request as httpRequest } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { KEEP_REPORTS } from "../../src/Profiling/Profiler.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { login, request, startTestApp, type TestApp } from "../support/TestApp.ts"
import { burnUntil, MIN_BURN_SHARE_PERCENT, selfRows } from "../support/Burn.ts"
import { eventually } from "../support/Eventually.ts"

/** `profiling_captures_refused_total{reason}` as the service's /metrics shows it. */
const refusedCount = async (app: TestApp, reason: string) =>
  (await scrapeMetrics(app.url)).first("profiling_captures_refused_total", { reason }) ?? Number.NaN


interface Descriptor {
  readonly filename: string
  readonly path: string
  readonly size_bytes: number
  readonly created_at: number
}

/** Takes a report while this process (the service's own) burns CPU in `burnCpuForProfilerTest`. */
export const captureBusyReport = async (app: TestApp): Promise<Descriptor> => {
  let done = false
  const pending = request(app, "POST", "/api/profiling/reports", { body: { seconds: 1 } }).finally(() => {
    done = true
  })
  await burnUntil(() => done)
  const res = await pending
  expect(res.status).toBe(201)
  return res.body as Descriptor
}

/** A raw request: no URL normalisation by the client (fetch would collapse `..`). */
const rawRequest = (app: TestApp, method: string, path: string) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const url = new URL(app.url)
    const req = httpRequest({ host: url.hostname, port: url.port, path, method }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (c: Buffer) => chunks.push(c)).on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }))
    })
    req.on("error", reject)
    req.end()
  })

/** Writes a report by hand (the disabled service takes none). */
const writeReport = (directory: string, name: string, body = "<!DOCTYPE html><title>by hand</title>") => {
  mkdirSync(directory, { recursive: true })
  writeFileSync(join(directory, name), body)
}

/** The sampling window of a report: its start and its duration (the page's subtitle). */
const windowOf = (html: string) => {
  const match = /<p class="sub">(\S+) · ([\d.]+) ms/.exec(html)
  if (match === null) throw new Error("no sampling window in the report")
  const start = Date.parse(match[1]!)
  return { start, end: start + Number(match[2]) }
}

describe("profiling endpoints", () => {
  let app: TestApp
  let outside: string
  const SECRET = "TOP-SECRET-OUTSIDE-THE-REPORT-DIRECTORY"
  beforeAll(async () => {
    app = await startTestApp({ config: { profilingIntervalSeconds: 7 } })
    outside = mkdtempSync(join(tmpdir(), "ads-outside-"))
    writeFileSync(join(outside, "secret.html"), SECRET)
  })
  afterAll(() => app?.close())

  const dir = () => join(app.dataDir, "profiling")

  it("reports its status without authentication", async () => {
    const res = await request(app, "GET", "/api/profiling/status")
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      enabled: false,
      profiler_installed: true,
      output_directory: dir(),
      interval_seconds: 7,
      python_version: `node ${process.version}`,
      command: "node:inspector Profiler, 1 ms sampling"
    })
  })

  it("refuses a capture while disabled with 409; listing, download and delete keep working", async () => {
    writeReport(dir(), "kept.html")
    const refusedBefore = await refusedCount(app, "disabled")
    const res = await request(app, "POST", "/api/profiling/reports", { body: { seconds: 1 } })
    expect(res).toMatchObject({ status: 409, body: { detail: "Profiling is disabled" } })
    expect(await refusedCount(app, "disabled")).toBe(refusedBefore + 1)
    expect(readdirSync(dir())).toEqual(["kept.html"])

    const listed = (await request(app, "GET", "/api/profiling/reports")).body as { reports: Array<Descriptor> }
    expect(listed.reports.map((r) => r.filename)).toEqual(["kept.html"])
    const served = await rawRequest(app, "GET", "/api/profiling/reports/kept.html")
    expect(served).toEqual({ status: 200, body: "<!DOCTYPE html><title>by hand</title>" })
    const del = await request(app, "DELETE", "/api/profiling/reports/kept.html")
    expect(del).toMatchObject({ status: 200, body: { message: "Report deleted", filename: "kept.html" } })
    expect(readdirSync(dir())).toEqual([])
  })

  it("validates the capture duration (1–60 s)", async () => {
    for (const seconds of [0, 61, 1.5, "3"]) {
      const res = await request(app, "POST", "/api/profiling/reports", { body: { seconds } })
      expect(res.status, String(seconds)).toBe(422)
    }
  })

  it("answers 404 with the filename for an absent report", async () => {
    const res = await request(app, "GET", "/api/profiling/reports/nope.html")
    expect(res).toMatchObject({ status: 404, body: { detail: "Report nope.html not found" } })
    const del = await request(app, "DELETE", "/api/profiling/reports/nope.html")
    expect(del).toMatchObject({ status: 404, body: { detail: "Report nope.html not found" } })
  })

  it("refuses names outside the pattern, encoded traversal and symlinks escaping the directory with 400", async () => {
    mkdirSync(dir(), { recursive: true })
    symlinkSync(join(outside, "secret.html"), join(dir(), "escape.html"))
    symlinkSync(join(outside, "gone.html"), join(dir(), "dangling.html"))
    const invalid = [
      "..%2F..%2Fetc%2Fpasswd",
      "..%2f..%2f..%2fetc%2fpasswd.html",
      "%2e%2e%2f" + encodeURIComponent(join(outside, "secret.html")),
      encodeURIComponent(join(outside, "secret.html")),
      "%2E%2E",
      "..",
      ".hidden.html",
      "report.txt",
      "a%5C..%5Csecret.html",
      "escape.html",
      "dangling.html"
    ]
    for (const name of invalid) {
      const res = await rawRequest(app, "GET", `/api/profiling/reports/${name}`)
      expect({ name, status: res.status, body: JSON.parse(res.body) as unknown }).toEqual({ name, status: 400, body: { detail: "Invalid filename" } })
      const del = await rawRequest(app, "DELETE", `/api/profiling/reports/${name}`)
      expect({ name, status: del.status }).toEqual({ name, status: 400 })
    }
    // Raw `..` segments never reach a report: the route does not match (or the name is refused).
    for (const path of ["/api/profiling/reports/../../../etc/passwd", `/api/profiling/reports/..${outside}/secret.html`, "/api/profiling/reports/./../reports/x.html"]) {
      const res = await rawRequest(app, "GET", path)
      expect([400, 404], path).toContain(res.status)
      expect(res.body).not.toContain(SECRET)
      expect(res.body).not.toContain("root:")
    }
    // The escaping link is neither served, listed nor deleted, and its target is untouched.
    const listed = (await request(app, "GET", "/api/profiling/reports")).body as { reports: Array<Descriptor> }
    expect(listed.reports.map((r) => r.filename)).not.toContain("escape.html")
    expect(existsSync(join(outside, "secret.html"))).toBe(true)
  })

  it("refuses names over 255 bytes with 400, never a 500", async () => {
    // Such a name reaches the service (App.ts raises the router's parameter limit), which refuses it
    // before the file system does (ENAMETOOLONG).
    for (const length of [256, 300]) {
      const name = "a".repeat(length - ".html".length) + ".html"
      for (const method of ["GET", "DELETE"] as const) {
        const res = await request(app, method, `/api/profiling/reports/${name}`)
        expect({ method, length, status: res.status, body: res.body }).toEqual({ method, length, status: 400, body: { detail: "Invalid filename" } })
      }
    }
    // 255 bytes is a valid name: absent, so 404.
    const longest = "a".repeat(250) + ".html"
    expect(await request(app, "GET", `/api/profiling/reports/${longest}`)).toMatchObject({ status: 404, body: { detail: `Report ${longest} not found` } })
  })

  it("refuses names with NUL or bytes that are not UTF-8 with 400 Invalid filename (the report rule wins over the 422 of other parameters)", async () => {
    writeReport(dir(), "nul.html")
    const names = ["%00", "a%00.html", "nul.html%00", "%00nul.html", "%FF", "a%FF.html", "%C3%28.html", "%E2%82.html", "nul%00.html%FF", "a%FF%00b.html"]
    for (const name of names) {
      for (const method of ["GET", "DELETE"] as const) {
        const res = await rawRequest(app, method, `/api/profiling/reports/${name}`)
        expect({ name, method, status: res.status, body: JSON.parse(res.body) as unknown })
          .toEqual({ name, method, status: 400, body: { detail: "Invalid filename" } })
      }
    }
    // Nothing was deleted; the other parameters keep their 422 for the same text.
    expect(readdirSync(dir())).toContain("nul.html")
    const admin = (await login(app, "admin")).access_token
    for (const value of ["a%00b", "a%FFb"]) {
      const other = await request(app, "GET", `/audit-logs/user/${value}`, { token: admin })
      expect({ value, status: other.status, loc: (other.body as { detail: Array<{ loc: unknown }> }).detail[0]?.loc })
        .toEqual({ value, status: 422, loc: ["path", "user_id"] })
    }
  })

  it("serves a symlink that resolves inside the directory", async () => {
    writeReport(dir(), "report-1.html", "<!DOCTYPE html><title>report one</title>")
    symlinkSync(join(dir(), "report-1.html"), join(dir(), "latest.html"))
    const res = await rawRequest(app, "GET", "/api/profiling/reports/latest.html")
    expect(res.status).toBe(200)
    expect(res.body).toContain("report one")
  })

  it("deletes a report: 200 {message, filename}, then 404", async () => {
    const del = await request(app, "DELETE", "/api/profiling/reports/report-1.html")
    expect(del).toMatchObject({ status: 200, body: { message: "Report deleted", filename: "report-1.html" } })
    expect((await request(app, "GET", "/api/profiling/reports/report-1.html")).status).toBe(404)
  })

  it("is described in the OpenAPI document", async () => {
    const doc = (await request(app, "GET", "/openapi.json")).body as { paths: Record<string, Record<string, unknown>> }
    expect(Object.keys(doc.paths["/api/profiling/reports"]!)).toEqual(expect.arrayContaining(["get", "post"]))
    expect(Object.keys(doc.paths["/api/profiling/reports/{filename}"]!)).toEqual(expect.arrayContaining(["get", "delete"]))
    expect(doc.paths["/api/profiling/status"]).toBeDefined()
    const post = doc.paths["/api/profiling/reports"]!["post"] as { description: string; responses: Record<string, unknown> }
    expect(Object.keys(post.responses)).toEqual(expect.arrayContaining(["201", "409"]))
    expect(post.description).toContain("A capture is already running")
    expect(post.description).toContain("Profiling is disabled")
  })
})

describe("captures while enabled", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp({ config: { profilingEnabled: true, profilingIntervalSeconds: 1 } })
  })
  afterAll(() => app?.close())

  const dir = () => join(app.dataDir, "profiling")

  it("writes one report per interval while enabled", async () => {
    await eventually(async () => {
      const count = ((await request(app, "GET", "/api/profiling/reports")).body as { total_count: number }).total_count
      expect(count).toBeGreaterThanOrEqual(2)
    }, "two interval reports")
    expect((await request(app, "GET", "/api/profiling/status")).body).toMatchObject({ enabled: true, interval_seconds: 1 })
  })

  it("takes a report on demand that shows the busy function with its share of the samples, lists it, serves it as HTML", async () => {
    const descriptor = await captureBusyReport(app)
    expect(descriptor.filename).toMatch(/^profile-[0-9TZ]+-[a-z0-9]+\.html$/)
    expect(descriptor).toMatchObject({ path: join(dir(), descriptor.filename) })
    expect(descriptor.size_bytes).toBeGreaterThan(0)
    expect(Math.abs(descriptor.created_at - Date.now() / 1000)).toBeLessThan(120)

    const listed = await request(app, "GET", "/api/profiling/reports")
    expect(listed.status).toBe(200)
    expect((listed.body as { reports: Array<Descriptor> }).reports).toContainEqual(descriptor)

    const res = await fetch(`${app.url}/api/profiling/reports/${descriptor.filename}`)
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toMatch(/^text\/html/)
    const html = await res.text()
    expect(Buffer.byteLength(html)).toBe(descriptor.size_bytes)
    const burn = selfRows(html).find((row) => row.name === "burnCpuForProfilerTest")
    expect(burn?.location).toMatch(/Burn\.ts:\d+$/)
    expect(burn?.selfPercent).toBeGreaterThanOrEqual(MIN_BURN_SHARE_PERCENT)
    expect(html).toContain("<svg id=\"flame\"")
    // Self-contained: no external scripts, styles, images or fonts.
    expect(html).not.toMatch(/\b(src|href)=["']?(https?:)?\/\//i)
    expect(html).not.toMatch(/@import|url\(\s*["']?https?:/i)
  })

  it("refuses a second on-demand capture with 409 while one runs, then accepts the next", async () => {
    // The first samples for 3 s (after waiting for the interval capture); the second is sent while
    // the first is pending. Whichever the service takes first, the other is refused at once.
    const refusedBefore = await refusedCount(app, "running")
    const first = request(app, "POST", "/api/profiling/reports", { body: { seconds: 3 } })
    const second = request(app, "POST", "/api/profiling/reports", { body: { seconds: 1 } })
    const refused = await Promise.race([first, second])
    expect(refused).toMatchObject({ status: 409, body: { detail: "A capture is already running" } })
    expect(await refusedCount(app, "running")).toBe(refusedBefore + 1)
    expect((await Promise.all([first, second])).map((r) => r.status).sort()).toEqual([201, 409])
    const next = await request(app, "POST", "/api/profiling/reports", { body: { seconds: 1 } })
    expect(next.status).toBe(201)
  })

  it("waits for the interval capture: no two reports sample at the same time", async () => {
    const onDemand = await request(app, "POST", "/api/profiling/reports", { body: { seconds: 1 } })
    expect(onDemand.status).toBe(201)
    // The on-demand report and the interval reports written before it (newest first).
    const { reports } = (await request(app, "GET", "/api/profiling/reports")).body as { reports: Array<Descriptor> }
    const recent = reports.slice(reports.findIndex((r) => r.filename === (onDemand.body as Descriptor).filename)).slice(0, 4)
    expect(recent.length).toBe(4)
    const windows = await Promise.all(recent.map(async (r) => windowOf((await rawRequest(app, "GET", `/api/profiling/reports/${r.filename}`)).body)))
    windows.sort((a, b) => a.start - b.start)
    for (let i = 1; i < windows.length; i++) {
      expect(windows[i]!.start, `report ${i} starts after report ${i - 1} ends`).toBeGreaterThanOrEqual(windows[i - 1]!.end)
    }
  })

  it(`keeps the newest ${KEEP_REPORTS} reports`, async () => {
    const old = Date.now() / 1000 - 3600
    for (let i = 0; i < KEEP_REPORTS + 3; i++) {
      const file = join(dir(), `old-${String(i).padStart(2, "0")}.html`)
      writeFileSync(file, "<!DOCTYPE html><title>old</title>")
      utimesSync(file, old + i, old + i)
    }
    const fresh = (await request(app, "POST", "/api/profiling/reports", { body: { seconds: 1 } })).body as Descriptor
    const listed = (await request(app, "GET", "/api/profiling/reports")).body as { reports: Array<Descriptor>; total_count: number }
    // An interval report may be written (not yet pruned) after the capture: it sorts first.
    const newer = listed.reports.findIndex((r) => r.filename === fresh.filename)
    expect(newer).toBeGreaterThanOrEqual(0)
    expect(listed.total_count).toBeGreaterThanOrEqual(KEEP_REPORTS)
    expect(listed.total_count).toBeLessThanOrEqual(KEEP_REPORTS + newer)
    // The oldest went first: the old reports left are the newest of them.
    const left = readdirSync(dir()).filter((n) => n.startsWith("old-")).sort()
    expect(left).not.toContain("old-00.html")
    expect(left).toEqual(Array.from({ length: left.length }, (_, i) => `old-${String(KEEP_REPORTS + 3 - left.length + i).padStart(2, "0")}.html`))
  })

})
