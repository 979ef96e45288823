/**
 * A generated report opens in headless Chromium, offline (no request leaves the page's own URL),
 * shows the busy function among the hot functions and draws its flame graph. Runs only where Chromium is installed
 * (`/usr/bin/chromium` or `CHROMIUM_PATH`); `UPDATE_SCREENSHOTS=1` saves the screenshot of
 * docs/operations.md#profiling.
 */
import { mkdirSync, mkdtempSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Browser, hasChromium, launchChromium } from "../support/Browser.ts"
import { renderReport } from "../../src/Profiling/Report.ts"
import { request, startTestApp, type TestApp } from "../support/TestApp.ts"
import { burnUntil, MIN_BURN_SHARE_PERCENT } from "../support/Burn.ts"

describe.runIf(hasChromium)("a profiling report in headless Chromium", () => {
  let app: TestApp
  let browser: Browser
  beforeAll(async () => {
    app = await startTestApp({ config: { profilingEnabled: true, profilingIntervalSeconds: 1 } })
    browser = await launchChromium()
  })
  afterAll(async () => {
    await browser?.close()
    await app?.close()
  })

  it("renders the hot-function tables and the flame graph with no external request", async () => {
    let done = false
    const pending = request(app, "POST", "/api/profiling/reports", { body: { seconds: 2 } }).finally(() => {
      done = true
    })
    await burnUntil(() => done)
    const created = await pending
    expect(created.status).toBe(201)
    const { filename } = created.body as { filename: string }
    const url = `${app.url}/api/profiling/reports/${filename}`

    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } })
    const requested: Array<string> = []
    page.on("request", (r) => requested.push(r.url()))
    const errors: Array<string> = []
    page.on("pageerror", (e) => errors.push(e.message))
    const response = await page.goto(url, { waitUntil: "load" })
    expect(response?.status()).toBe(200)

    expect(await page.locator("h1").textContent()).toBe("CPU profile")
    const burn = page.locator("#by-self tbody tr", { has: page.locator("td.fn", { hasText: /^burnCpuForProfilerTest$/ }) })
    expect(await burn.count()).toBe(1)
    expect(await burn.locator("td.loc").textContent()).toMatch(/Burn\.ts:\d+$/)
    expect(Number.parseFloat(await burn.locator("td.n").nth(2).textContent() ?? "")).toBeGreaterThanOrEqual(MIN_BURN_SHARE_PERCENT)
    // The flame graph draws the root and the busy function; how many other frames the sampler
    // caught (and wide enough to draw) varies from run to run.
    expect(await page.locator("#flame g.f", { hasText: "(root)" }).count()).toBe(1)
    expect(await page.locator("#flame g.f", { hasText: "burnCpuForProfilerTest" }).count()).toBeGreaterThan(0)

    // `UPDATE_SCREENSHOTS=1` refreshes docs/profiling-report.png; otherwise it goes to a temporary file.
    const shot = process.env["UPDATE_SCREENSHOTS"] === "1" ? "docs/profiling-report.png" : join(mkdtempSync(join(tmpdir(), "ads-shot-")), "report.png")
    mkdirSync(dirname(shot), { recursive: true })
    await page.screenshot({ path: shot, fullPage: false })
    expect(statSync(shot).size).toBeGreaterThan(0)

    expect(errors).toEqual([])
    expect(requested.filter((u) => u !== url)).toEqual([])

    await page.close()
  })

  // On a profile of known shape, so what a zoom must hide does not depend on what the sampler caught:
  // (root) → main → {hot → leaf, cold}, and (root) → (program).
  it("zooms the flame graph into a clicked frame and resets", async () => {
    const frame = (id: number, functionName: string, hitCount: number, children: Array<number> = []) => ({
      id,
      callFrame: { functionName, url: functionName.startsWith("(") ? "" : "file:///app/main.js", lineNumber: id, columnNumber: 0 },
      hitCount,
      children
    })
    const html = renderReport({
      nodes: [frame(1, "(root)", 0, [2, 3]), frame(2, "main", 1, [4, 5]), frame(3, "(program)", 2), frame(4, "hot", 3, [6]), frame(5, "cold", 2), frame(6, "leaf", 2)],
      startTime: 0,
      endTime: 12_000
    }, { title: "synthetic", startedAt: new Date(0), command: "test" })
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
    const errors: Array<string> = []
    page.on("pageerror", (e) => errors.push(e.message))
    await page.setContent(html, { waitUntil: "load" })
    const visible = () => page.locator("#flame g.f:visible").locator("title").allTextContents().then((ts) => ts.map((t) => t.split(" ")[0]).sort())
    expect(await visible()).toEqual(["(program)", "(root)", "cold", "hot", "leaf", "main"])

    const hot = page.locator("#flame g.f", { hasText: "hot (" })
    await hot.click()
    // The clicked frame fills the width; its ancestors stay, its descendants stay, the rest goes.
    expect(await visible()).toEqual(["(root)", "hot", "leaf", "main"])
    expect(await hot.locator("rect").getAttribute("width")).toBe("1200")
    expect(await page.locator("#flame g.f", { hasText: "leaf (" }).locator("rect").getAttribute("width")).toBe("480")
    await hot.hover()
    expect(await page.locator("#detail").textContent()).toContain("hot (/app/main.js:5)")

    await page.locator("#reset").click()
    expect(await visible()).toEqual(["(program)", "(root)", "cold", "hot", "leaf", "main"])
    expect(await hot.locator("rect").getAttribute("width")).toBe("600")
    expect(errors).toEqual([])
    await page.close()
  })
})
