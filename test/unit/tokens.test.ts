import { Effect } from "effect"
import { generateKeyPair, type JWTPayload, SignJWT } from "jose"
import { describe, expect, it, vi } from "vitest"
import { bearerToken, CLOCK_TOLERANCE_SECONDS, makeTokenVerifier, rolesOf } from "../../src/Auth/TokenVerifier.ts"
import { likePattern } from "../../src/Authors/Repo.ts"

describe("bearerToken (non-bearer schemes)", () => {
  it("takes the token of a Bearer header, case-insensitively", () => {
    expect(bearerToken("Bearer abc.def.ghi")).toBe("abc.def.ghi")
    expect(bearerToken("bearer abc")).toBe("abc")
    expect(bearerToken("BEARER \tabc ")).toBe("abc")
  })

  it.each([undefined, "", "Bearer", "Bearer ", "Basic YTpi", "Token abc", "Bearer a b", "Bearerabc", "abc"])("refuses other schemes, blanks and junk: %j", (header) => {
    expect(bearerToken(header)).toBeUndefined()
  })
})

describe("rolesOf (roles from tokens)", () => {
  it("unions realm_access, resource_access[client] and top-level roles, without duplicates", () => {
    expect(rolesOf({
      realm_access: { roles: ["a", "b"] },
      resource_access: { client: { roles: ["b", "c"] }, other: { roles: ["x"] } },
      roles: ["d", 5]
    }, "client")).toEqual(["a", "b", "c", "d"])
  })

  it("ignores malformed claims", () => {
    expect(rolesOf({ realm_access: "admin", resource_access: { client: null }, roles: "admin" }, "client")).toEqual([])
    expect(rolesOf({}, "client")).toEqual([])
  })
})

describe("likePattern", () => {
  it("escapes LIKE wildcards so search is a literal substring", () => {
    expect(likePattern("100%_x\\")).toBe("%100\\%\\_x\\\\%")
    expect(likePattern("plain")).toBe("%plain%")
  })
})

describe("token verification: clock tolerance", () => {
  const setup = async () => {
    const { privateKey, publicKey } = await generateKeyPair("ES256")
    const verifier = makeTokenVerifier({ key: publicKey, issuer: "urn:test", audience: undefined, clientId: "c" })
    const mint = (claims: JWTPayload) =>
      new SignJWT({ typ: "Bearer", iat: now(), ...claims }).setProtectedHeader({ alg: "ES256" }).setIssuer("urn:test").setSubject("s").sign(privateKey)
    /** "ok", or why the token was refused. */
    const outcome = async (token: string) => {
      const result = await Effect.runPromise(Effect.result(verifier.verify(token)))
      return result._tag === "Success" ? "ok" : result.failure.reason
    }
    return { mint, outcome }
  }
  const now = () => Math.floor(Date.now() / 1000)

  it(`exp and nbf may be off by ${CLOCK_TOLERANCE_SECONDS} s (the provider's clock and ours), no more; an iat ahead is no reason to refuse`, async () => {
    expect(CLOCK_TOLERANCE_SECONDS).toBe(5)
    const { mint, outcome } = await setup()
    expect(await outcome(await mint({ exp: now() - 3 }))).toBe("ok")
    expect(await outcome(await mint({ exp: now() - 30 }))).toBe("expired")
    expect(await outcome(await mint({ exp: now() + 300, nbf: now() + 3 }))).toBe("ok")
    expect(await outcome(await mint({ exp: now() + 300, nbf: now() + 30 }))).toBe("invalid")
    expect(await outcome(await mint({ exp: now() + 300, iat: now() + 3 }))).toBe("ok")
  })

  it("a token verified once and cached keeps the same tolerance after its exp, then is refused as expired", async () => {
    const { mint, outcome } = await setup()
    const exp = now() + 2
    const token = await mint({ exp })
    expect(await outcome(token)).toBe("ok")
    vi.useFakeTimers({ toFake: ["Date"] })
    try {
      vi.setSystemTime((exp + CLOCK_TOLERANCE_SECONDS - 1) * 1000)
      expect(await outcome(token)).toBe("ok")
      vi.setSystemTime((exp + CLOCK_TOLERANCE_SECONDS + 1) * 1000)
      expect(await outcome(token)).toBe("expired")
    } finally {
      vi.useRealTimers()
    }
  })
})

describe("token verification: the issuer", () => {
  it("an issuer with a trailing slash (as Auth0's) verifies against OIDC_ISSUER_URL read without it; another issuer does not", async () => {
    const { privateKey, publicKey } = await generateKeyPair("ES256")
    const verifier = makeTokenVerifier({ key: publicKey, issuer: "https://idp.example/tenant", audience: undefined, clientId: "c" })
    const outcome = async (iss: string) => {
      const token = await new SignJWT({ typ: "Bearer" }).setProtectedHeader({ alg: "ES256" }).setIssuer(iss).setSubject("s")
        .setIssuedAt().setExpirationTime("5m").sign(privateKey)
      const result = await Effect.runPromise(Effect.result(verifier.verify(token)))
      return result._tag === "Success" ? "ok" : result.failure.reason
    }
    expect(await outcome("https://idp.example/tenant")).toBe("ok")
    expect(await outcome("https://idp.example/tenant/")).toBe("ok")
    expect(await outcome("https://idp.example/tenant//")).toBe("invalid")
    expect(await outcome("https://idp.example/other/")).toBe("invalid")
  })
})
