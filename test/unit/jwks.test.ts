/**
 * The identity provider's key cache (Auth/Jwks.ts, docs/deployment.md#identity-provider) on its
 * injected clock: an outage of the provider far past the keys' cache age never turns a valid
 * token into a failure; a key the cache never fetched cannot be fetched during the outage; once
 * the provider is back, a rotated key is picked up. No waiting: the clock is a variable.
 */
import { exportJWK, generateKeyPair, type JWK, jwtVerify, SignJWT } from "jose"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeJwksCache } from "../../src/Auth/Jwks.ts"

const MAX_AGE_MS = 10 * 60_000
const COOLDOWN_MS = 30_000

const keyPair = async (kid: string) => {
  const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true })
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "ES256", use: "sig" } as JWK }
}
type KeyPair = Awaited<ReturnType<typeof keyPair>>

const sign = (key: KeyPair) =>
  new SignJWT({ sub: "someone" }).setProtectedHeader({ alg: "ES256", kid: key.kid }).setIssuedAt().setExpirationTime("5m").sign(key.privateKey)

/** The provider's JWKS endpoint: what it publishes, or down (503). */
let published: Array<JWK> | "down" = []
let fetches = 0
let server: Server
let jwksUri: string

beforeAll(async () => {
  server = createServer((_req, res) => {
    fetches++
    if (published === "down") res.writeHead(503).end()
    else res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ keys: published }))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  jwksUri = `http://127.0.0.1:${(server.address() as AddressInfo).port}/certs`
})
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())))

describe("JWKS cache through a provider outage", () => {
  it("keeps verifying with the last keys fetched, however long the outage; picks up a rotated key once back", async () => {
    const first = await keyPair("first")
    const rotated = await keyPair("rotated")
    let now = 1_000_000
    /** Each failed fetch: whether the cached keys stayed. */
    const failures: Array<boolean> = []
    let onFailure: ((kept: boolean) => void) | undefined
    const getKey = makeJwksCache({
      jwksUri: () => Promise.resolve(jwksUri),
      maxAgeMs: MAX_AGE_MS,
      cooldownMs: COOLDOWN_MS,
      now: () => now,
      onFetchError: (_error, kept) => {
        failures.push(kept)
        onFailure?.(kept)
      }
    })
    const verify = async (token: string) => (await jwtVerify(token, getKey)).payload.sub
    /** Resolves with `kept` at the next failed fetch. */
    const nextFailure = () => new Promise<boolean>((resolve) => (onFailure = resolve))

    published = [first.jwk]
    expect(await verify(await sign(first))).toBe("someone")
    expect(fetches).toBe(1)

    // The provider goes down; the clock moves past the cache age again and again (days in all).
    published = "down"
    for (const elapsed of [MAX_AGE_MS + 1, 3 * 3_600_000, 3 * 86_400_000]) {
      now += elapsed
      const failed = nextFailure()
      // Checked with the keys at hand at once, while the refetch it triggers fails …
      expect(await verify(await sign(first))).toBe("someone")
      // … and that failure leaves the keys in place, as the next round shows.
      expect(await failed).toBe(true)
    }
    expect(failures).toEqual([true, true, true])

    // A key the cache never fetched cannot be fetched now: refused.
    now += COOLDOWN_MS
    await expect(verify(await sign(rotated))).rejects.toThrow()

    // The provider is back with the rotated key: after the cooldown, an unknown key id refetches.
    published = [first.jwk, rotated.jwk]
    now += COOLDOWN_MS
    expect(await verify(await sign(rotated))).toBe("someone")
    expect(await verify(await sign(first))).toBe("someone")
  })
})
