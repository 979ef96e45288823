/**
 * The client package in headless Chromium: a page bundled by esbuild from `@author-directory/client`
 * (the built package, as a web app's bundler would take it) and served from its own origin, which
 * the service lists in CORS_ALLOWED_ORIGINS. The page logs in, lists, opens the `/web` client on the
 * browser's own WebSocket, creates an author over HTTP and receives the broadcast of that create; a
 * duplicate is refused with the typed 409 class, in the browser. Runs only where Chromium is
 * installed (`/usr/bin/chromium` or `CHROMIUM_PATH`), as the other browser test does; `.ci/run`
 * installs it.
 */
import { build } from "esbuild"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Browser, hasChromium, launchChromium } from "../support/Browser.ts"
import { startTestApp, type TestApp } from "../support/TestApp.ts"

const ROOT = process.cwd()

/** The page's program: what a web app would write. It reports through `window.result`. */
const PAGE_SCRIPT = `
import { AuthorNameTaken, createClient } from "@author-directory/client"

const report = (result) => { window.result = result }
const run = async () => {
  const baseUrl = new URL(location.href).searchParams.get("service")
  const client = createClient({ baseUrl })
  await client.login("admin", "admin")
  const before = await client.authors.list()
  const name = "Browser " + crypto.getRandomValues(new Uint32Array(1))[0]
  let resolveBroadcast
  const broadcast = new Promise((resolve) => (resolveBroadcast = resolve))
  const ws = await client.connectWs({ format: "protobuf", onBroadcast: (event) => { if (event.author.name === name) resolveBroadcast(event) } })
  const created = await client.authors.create({ name })
  const event = await broadcast
  const page = await ws.request(2, { page: 1, per_page: 1 })
  await ws.close()
  const duplicate = await client.authors.create({ name }).then(() => "created twice", (error) =>
    error instanceof AuthorNameTaken ? { tag: error._tag, detail: error.detail } : String(error))
  const after = await client.authors.list()
  report({
    listedBefore: Array.isArray(before),
    created,
    broadcast: { event: event.event, author: event.author },
    page: { status: page.status_code, total: page.meta && page.meta.total },
    duplicate,
    listedAfter: after.some((a) => a.id === created.id),
    wsState: ws.state()
  })
}
run().catch((error) => report({ error: String(error && error.stack || error) }))
`

describe.runIf(hasChromium)("the client package in headless Chromium", () => {
  let app: TestApp
  let browser: Browser
  let pages: Server
  let pageOrigin: string
  let bundle: string
  let bundled: Array<string>

  beforeAll(async () => {
    const built = await build({
      stdin: { contents: PAGE_SCRIPT, resolveDir: ROOT, sourcefile: "page.js", loader: "js" },
      bundle: true,
      format: "esm",
      platform: "browser",
      target: "es2022",
      // Not the repository's tsconfig.json: its `paths` point the package name at the sources
      // (for the root type-check); a web app resolves the package through node_modules.
      tsconfigRaw: {},
      write: false,
      metafile: true,
      logLevel: "silent"
    })
    bundle = built.outputFiles[0]!.text
    bundled = Object.keys(built.metafile.inputs)
    // The page's own origin: another port than the service's, so every call is cross-origin.
    pages = createServer((req, res) => {
      if (req.url?.startsWith("/page.js")) {
        res.writeHead(200, { "content-type": "text/javascript" }).end(bundle)
      } else {
        res.writeHead(200, { "content-type": "text/html" }).end(`<!doctype html><title>client</title><script type="module" src="/page.js"></script>`)
      }
    })
    await new Promise<void>((resolve) => pages.listen(0, "127.0.0.1", resolve))
    pageOrigin = `http://127.0.0.1:${(pages.address() as AddressInfo).port}`
    app = await startTestApp({ config: { corsAllowedOrigins: [pageOrigin] } })
    browser = await launchChromium()
  })

  afterAll(async () => {
    await browser?.close()
    await app?.close()
    await new Promise((resolve) => pages?.close(resolve))
  })

  it("logs in, lists, creates, and receives the broadcast of its own create over the browser's WebSocket", async () => {
    // The built package (through the workspace link), not the sources; effect's browser build beside it.
    // (A checkout whose node_modules links to another checkout's bundles that one's package: hence the suffix.)
    expect(bundled.filter((input) => input.endsWith("packages/client/dist/index.js"))).toHaveLength(1)
    expect(bundled.filter((input) => /(^|\/)src\//.test(input) && !input.includes("node_modules"))).toEqual([])
    const page = await browser.newPage()
    const errors: Array<string> = []
    page.on("pageerror", (e) => errors.push(e.message))
    const requested: Array<string> = []
    page.on("request", (r) => requested.push(new URL(r.url()).origin))
    await page.goto(`${pageOrigin}/?service=${encodeURIComponent(app.url)}`, { waitUntil: "load" })
    await page.waitForFunction(() => (globalThis as unknown as { result?: unknown }).result !== undefined, undefined, { timeout: 30_000 })
    const result = await page.evaluate(() => (globalThis as unknown as { result: unknown }).result)

    expect(result).toEqual({
      listedBefore: true,
      created: { id: expect.any(Number), name: expect.stringMatching(/^Browser \d+$/), created_at: expect.any(String) },
      broadcast: { event: "author.created", author: expect.any(Object) },
      page: { status: 0, total: expect.any(Number) },
      duplicate: { tag: "AuthorNameTaken", detail: expect.stringMatching(/^Author with name Browser \d+ already exists$/) },
      listedAfter: true,
      wsState: "closed"
    })
    const { created, broadcast } = result as { created: { id: number; name: string }; broadcast: { author: { id: number; name: string } } }
    expect(broadcast.author).toMatchObject({ id: created.id, name: created.name })
    expect(errors).toEqual([])
    // The page and the service, nothing else (the WebSocket is not a request playwright reports).
    expect([...new Set(requested)].sort()).toEqual([app.url, pageOrigin].sort())
    await page.close()
  })
})
