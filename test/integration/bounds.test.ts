/**
 * Bounded memory (issue "Reliability"): each in-process structure that grows with clients has a
 * cap, and `/metrics` shows what the cap did — the token-verification cache, the in-process
 * rate limiter's keys, and the `/web` upgrades (per-IP rate, the instance-wide connection cap).
 * (The per-connection send queue's bound is exercised in ws.test.ts, "a client that does not read".)
 */
import { Effect } from "effect"
import { randomUUID } from "node:crypto"
import { generateKeyPair, SignJWT } from "jose"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTokenVerifier } from "../../src/Auth/TokenVerifier.ts"
import { registry } from "../../src/Observability/Metrics.ts"
import { memoryRateLimiter } from "../../src/RateLimit/RateLimiter.ts"
import { readRegistry, scrapeMetrics } from "../support/Metrics.ts"
import { rawWs } from "../support/RawWs.ts"
import { signToken, startTestApp, type TestApp } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"

describe("token-verification cache", () => {
  it("holds at most cacheSize tokens: the oldest is evicted (counted) and verified again when next seen", async () => {
    const { privateKey, publicKey } = await generateKeyPair("ES256")
    const sign = (sub: string) =>
      new SignJWT({ typ: "Bearer" }).setProtectedHeader({ alg: "ES256" }).setIssuer("bounds").setSubject(sub).setIssuedAt()
        .setExpirationTime("5m").sign(privateKey)
    const verifier = makeTokenVerifier({ key: publicKey, issuer: "bounds", audience: undefined, clientId: "x", cacheSize: 2 })
    const tokens = await Promise.all(["a", "b", "c"].map(sign))
    const before = (await readRegistry(registry)).firstOrZero("token_cache_evictions_total")
    for (const token of tokens) await Effect.runPromise(verifier.verify(token))
    let metrics = await readRegistry(registry)
    expect(metrics.firstOrZero("token_cache_entries")).toBe(2)
    expect(metrics.firstOrZero("token_cache_evictions_total") - before).toBe(1)
    // "a" was evicted: seen again, it is verified (and cached) again, evicting "b".
    expect((await Effect.runPromise(verifier.verify(tokens[0]!))).id).toBe("a")
    metrics = await readRegistry(registry)
    expect(metrics.firstOrZero("token_cache_entries")).toBe(2)
    expect(metrics.firstOrZero("token_cache_evictions_total") - before).toBe(2)
    // "c" and "a" are cached: no eviction.
    await Effect.runPromise(verifier.verify(tokens[2]!))
    await Effect.runPromise(verifier.verify(tokens[0]!))
    expect((await readRegistry(registry)).firstOrZero("token_cache_evictions_total") - before).toBe(2)
  })
})

describe("in-process rate limiter", () => {
  it("holds at most maxKeys keys: the least recently used goes (counted when it had hits in its window), its budget starts again", async () => {
    const limiter = await Effect.runPromise(memoryRateLimiter({ maxKeys: 3 }))
    const hit = (key: string) => Effect.runPromise(limiter.hit(key, 5, 60_000))
    const before = (await readRegistry(registry)).firstOrZero("rate_limit_keys_evicted_total")
    await hit("k1")
    await hit("k1")
    await hit("k2")
    await hit("k3")
    expect((await hit("k1")).remaining).toBe(2) // k1 is now the most recently used
    expect((await hit("k4")).remaining).toBe(4) // full: k2, the least recently used, goes
    let metrics = await readRegistry(registry)
    expect(metrics.firstOrZero("rate_limit_keys")).toBe(3)
    expect(metrics.firstOrZero("rate_limit_keys_evicted_total") - before).toBe(1)
    expect((await hit("k1")).remaining).toBe(1) // kept its window
    expect((await hit("k2")).remaining).toBe(4) // evicted: a fresh window (k3 goes now)
    metrics = await readRegistry(registry)
    expect(metrics.firstOrZero("rate_limit_keys")).toBe(3)
    expect(metrics.firstOrZero("rate_limit_keys_evicted_total") - before).toBe(2)
    expect((await hit("k3")).remaining).toBe(4)
  })
})

describe("/web upgrades: per-IP rate limit and instance-wide connection cap", () => {
  let app: TestApp
  const clients: Array<WsClient> = []
  const scrape = () => scrapeMetrics(app.url)

  beforeAll(async () => {
    // 4 upgrades per IP per 60 s; 2 sockets per instance.
    app = await startTestApp({ config: { rateLimitEnabled: true, rateLimitPerMinute: 4, rateLimitBurst: 0, wsMaxConnections: 2 } })
  })
  afterAll(async () => {
    for (const c of clients) c.ws.terminate()
    await app.close()
  })

  it("past WS_MAX_CONNECTIONS an upgrade gets 503 before any token check; a closed connection makes room", async () => {
    const token = await signToken(app, { sub: `cap-${randomUUID()}`, roles: ["get-authors"] })
    const before = await scrape()
    const held = [connectWs(app.url, { token }), connectWs(app.url, { token })]
    clients.push(...held)
    for (const c of held) expect((await c.request(1, { filters: { id: -1 } })).status_code).toBe(0)
    const refused = rawWs(`${app.wsUrl}/web?token=${token}`)
    const answer = await refused.upgraded
    expect(answer.status).toBe(503)
    expect(JSON.parse(answer.body)).toEqual({ detail: "Too many connections" })
    expect(answer.headers["retry-after"]).toBe("5")
    const after = await scrape()
    expect(after.firstOrZero("ws_upgrades_refused_total", { reason: "capacity" }) - before.firstOrZero("ws_upgrades_refused_total", { reason: "capacity" })).toBe(1)
    // The refusal verified no token.
    expect(after.firstOrZero("token_validation_total", { status: "valid" })).toBe(before.firstOrZero("token_validation_total", { status: "valid" }) + 2)
    await held[0]!.close()
    // The server counts the socket gone when its end reaches it, which may come just after the
    // client saw the close: ask again until it has (each refusal is an answer, not a wait).
    for (;;) {
      const next = rawWs(`${app.wsUrl}/web?token=${token}`)
      const status = (await next.upgraded).status
      next.destroy()
      if (status === 101) break
      expect(status).toBe(503)
    }
    await held[1]!.close()
  })
})

describe("/web upgrades per client IP", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp({ config: { rateLimitEnabled: true, rateLimitPerMinute: 2, rateLimitBurst: 1 } })
  })
  afterAll(() => app.close())

  it("past RATE_LIMIT_PER_MINUTE + RATE_LIMIT_BURST upgrades per 60 s an IP gets 429 with Retry-After, without a signature check", async () => {
    const scrape = () => scrapeMetrics(app.url)
    const before = await scrape()
    const badToken = `${(await signToken(app, { sub: "ip-limited", roles: ["get-authors"] })).slice(0, -4)}AAAA`
    for (let i = 0; i < 3; i++) {
      expect(await connectWs(app.url, { token: badToken }).closed).toEqual({ code: 4001, reason: "Invalid or expired token" })
    }
    const refused = rawWs(`${app.wsUrl}/web?token=${badToken}`, { "X-Correlation-ID": "upgrade-429" })
    const answer = await refused.upgraded
    expect(answer.status).toBe(429)
    expect(JSON.parse(answer.body)).toEqual({ detail: "Rate limit exceeded" })
    expect(Number(answer.headers["retry-after"])).toBeGreaterThanOrEqual(1)
    expect(answer.headers).toMatchObject({ "x-ratelimit-limit": "3", "x-ratelimit-remaining": "0", "x-correlation-id": "upgrade-429" })
    const after = await scrape()
    expect(after.firstOrZero("ws_upgrades_refused_total", { reason: "rate_limit" }) - before.firstOrZero("ws_upgrades_refused_total", { reason: "rate_limit" })).toBe(1)
    // Three bad tokens were checked; the refused fourth was not.
    expect(after.firstOrZero("token_validation_total", { status: "invalid" }) - before.firstOrZero("token_validation_total", { status: "invalid" })).toBe(3)
  })
})
