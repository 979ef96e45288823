/**
 * An OIDC identity provider in the health report and readiness (docs/operations.md#health-and-probes)
 * and in the log (docs/operations.md#outages), against oauth2-mock-server on loopback:
 *
 * - `/health` carries `identity`: healthy while the provider's signing keys are held (also after the
 *   provider went away) or can be fetched, else unhealthy and 503;
 * - `/readyz` is 503 until the keys were fetched once: a provider that is down at start keeps the
 *   instance unready, the log says why once — the issuer URL and the cause — however often it is
 *   probed, and once the provider answers the instance becomes ready and the log says that once;
 * - a `POST /login` answered 503 because the provider does not answer logs one WARN naming the
 *   provider, once per outage, and the outage's end counts those logins.
 */
import { Option } from "effect"
import { OAuth2Server } from "oauth2-mock-server"
import { afterEach, describe, expect, it } from "vitest"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { eventually } from "../support/Eventually.ts"
import { type Cleanups, freePort, runCleanups } from "../support/Launcher.ts"
import { request, startTestApp } from "../support/TestApp.ts"

const cleanups: Cleanups = []
afterEach(() => runCleanups(cleanups))

/** A mock provider on `port` (the issuer is its root URL), stopped at the end of the test. */
const startProvider = async (port: number) => {
  const provider = new OAuth2Server()
  await provider.issuer.keys.generate("RS256")
  await provider.start(port, "127.0.0.1")
  provider.issuer.url = `http://127.0.0.1:${port}`
  cleanups.push(async () => {
    if (provider.listening) await provider.stop()
  })
  return provider
}

/** The app with the provider at `issuer`, its log lines collected (info and above). */
const appWith = async (issuer: string) => {
  const lines: Array<string> = []
  const app = await startTestApp({
    config: { rateLimitEnabled: false, oidcIssuerUrl: Option.some(issuer) },
    logLevel: "Info",
    logger: layerLoggerTo("json", (line) => lines.push(line))
  })
  cleanups.push(app.close)
  const records = () => lines.map((l) => JSON.parse(l) as Record<string, unknown>)
  const saying = (start: string) => records().filter((r) => String(r["message"]).startsWith(start))
  return { app, records, saying }
}

const body = (res: { status: number; body: unknown }) => ({ status: res.status, body: res.body })

const login = async (app: { readonly url: string }) => body(await request(app, "POST", "/login", { body: { username: "admin", password: "admin" } }))
const UNAVAILABLE = { status: 503, body: { detail: "Identity provider unavailable" } }

/** The provider's one outage-began line: a WARN with `fields`, its cause matching `cause`. */
const expectOneBeginning = (lines: ReadonlyArray<Record<string, unknown>>, fields: Record<string, unknown>, cause: RegExp) => {
  expect(lines).toHaveLength(1)
  expect(lines[0]).toMatchObject({ level: "WARN", dependency: "identity", ...fields })
  expect(String(lines[0]!["cause"])).toMatch(cause)
}

describe("identity provider: health, readiness and its outages", () => {
  it("keys fetched: /health and /readyz 200 with identity healthy; the provider gone, still healthy on the held keys", async () => {
    const port = await freePort()
    const provider = await startProvider(port)
    const { app, saying } = await appWith(`http://127.0.0.1:${port}`)
    const ready = await eventually(async () => {
      const res = await request(app, "GET", "/readyz")
      return res.status === 200 && res
    }, "/readyz 200")
    expect(ready.body).toMatchObject({ status: "healthy", identity: "healthy" })
    expect(body(await request(app, "GET", "/health"))).toMatchObject({ status: 200, body: { identity: "healthy" } })
    expect(saying("Identity provider http://")).toHaveLength(1)
    await provider.stop()
    // The keys are held: tokens still verify, so the identity check stays healthy.
    expect(body(await request(app, "GET", "/health"))).toMatchObject({ status: 200, body: { identity: "healthy" } })
    expect(body(await request(app, "GET", "/readyz"))).toMatchObject({ status: 200 })
  })

  it("a provider down at start: never ready, one WARN naming the issuer and the cause however often probed; ready once it answers, its end logged once", async () => {
    const port = await freePort()
    const issuer = `http://127.0.0.1:${port}`
    const { app, saying } = await appWith(issuer)
    const down = { status: "unhealthy", database: "healthy", redis: "healthy", websocket: { status: "healthy", active_connections: 0 }, identity: "unhealthy" }
    await eventually(() => saying("Outage began: the identity provider").length > 0, "the provider's outage in the log")
    for (let i = 0; i < 5; i++) {
      expect(body(await request(app, "GET", "/readyz"))).toEqual({ status: 503, body: down })
      expect(body(await request(app, "GET", "/health"))).toEqual({ status: 503, body: down })
    }
    // A login meanwhile: 503, counted in the same outage.
    expect(await login(app)).toEqual(UNAVAILABLE)
    expectOneBeginning(saying("Outage began: the identity provider"), {
      message: `Outage began: the identity provider ${issuer} (fetching its signing keys failed; /readyz answers 503 until they are fetched)`
    }, /fetch failed.*ECONNREFUSED/)

    await startProvider(port)
    await eventually(async () => (await request(app, "GET", "/readyz")).status === 200, "/readyz 200 once the provider answers")
    expect(body(await request(app, "GET", "/health"))).toMatchObject({ status: 200, body: { identity: "healthy" } })
    const ended = await eventually(() => saying("Outage ended: the identity provider")[0] ?? false, "the outage's end")
    expect(ended).toMatchObject({ level: "INFO", dependency: "identity" })
    // The failed key fetch that began it and the login answered 503; not the probes.
    expect(ended["failed"]).toBe(2)
    expect(saying("Outage began: the identity provider")).toHaveLength(1)
    expect(saying("Outage ended: the identity provider")).toHaveLength(1)
  })

  it("logins answered 503 while the provider is down: one WARN naming the provider for the outage, the count when it ends", async () => {
    const port = await freePort()
    const issuer = `http://127.0.0.1:${port}`
    const provider = await startProvider(port)
    const { app, saying } = await appWith(issuer)
    await eventually(async () => (await request(app, "GET", "/readyz")).status === 200, "/readyz 200")
    expect((await login(app)).status).toBe(200)
    await provider.stop()
    for (let i = 0; i < 4; i++) expect(await login(app)).toEqual(UNAVAILABLE)
    expectOneBeginning(saying("Outage began: the identity provider"), {
      operation: "POST /login",
      message: `Outage began: the identity provider ${issuer} (POST /login failed; answered 503 Identity provider unavailable)`
    }, /ECONNREFUSED/)
    // Still ready on the held keys.
    expect((await request(app, "GET", "/readyz")).status).toBe(200)

    await startProvider(port)
    const ended = await eventually(() => saying("Outage ended: the identity provider")[0] ?? false, "the outage's end")
    expect(ended).toMatchObject({ level: "INFO", dependency: "identity", failed: 4 })
    expect((await login(app)).status).toBe(200)
    expect(saying("Outage began: the identity provider")).toHaveLength(1)
  })
})
