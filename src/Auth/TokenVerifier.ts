/**
 * Bearer-token verification with jose: asymmetric algorithms only, issuer, audience when
 * configured (`aud` must contain it), exp/nbf/iat with a small clock tolerance (the provider's
 * clock and ours may differ by a few seconds); roles as docs/http-api.md#conventions reads them. Verified tokens
 * are cached until they expire, so the hot path verifies a token's signature once. The cache holds
 * at most `cacheSize` tokens (10,000): when full, the oldest entry goes (`token_cache_evictions_total`;
 * its token is verified again when next seen); `token_cache_entries` shows how full it is.
 */
import { Context, Data, Effect } from "effect"
import { errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey, type CryptoKey } from "jose"
import type { Principal } from "../Domain/User.ts"
import { tokenCacheEntries, tokenCacheEvictionsTotal, tokenValidationTotal } from "../Observability/Metrics.ts"

export const ASYMMETRIC_ALGORITHMS = [
  "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]

export type TokenRejection = "invalid" | "expired"

export class TokenRejected extends Data.TaggedError("TokenRejected")<{ readonly reason: TokenRejection }> {}

export class TokenVerifier extends Context.Service<TokenVerifier, {
  /** Verifies an access token (a refresh or ID token is refused). */
  readonly verify: (token: string) => Effect.Effect<Principal, TokenRejected>
}>()("Auth/TokenVerifier") {}

const stringArray = (u: unknown): ReadonlyArray<string> =>
  Array.isArray(u) ? u.filter((x): x is string => typeof x === "string") : []

const record = (u: unknown): Record<string, unknown> =>
  typeof u === "object" && u !== null ? u as Record<string, unknown> : {}

/** docs/http-api.md#conventions: union of realm_access.roles, resource_access[client].roles and top-level roles. */
export const rolesOf = (payload: JWTPayload, clientId: string): ReadonlyArray<string> => {
  const realm = stringArray(record(payload["realm_access"])["roles"])
  const client = stringArray(record(record(payload["resource_access"])[clientId])["roles"])
  const top = stringArray(payload["roles"])
  return [...new Set([...realm, ...client, ...top])]
}

export interface VerifierOptions {
  readonly key: JWTVerifyGetKey | CryptoKey
  readonly issuer: string
  readonly audience: string | undefined
  readonly clientId: string
  readonly cacheSize?: number
  /** Seconds of clock skew allowed on exp, nbf and iat (default `CLOCK_TOLERANCE_SECONDS`). */
  readonly clockToleranceSeconds?: number
}

const MAX_CACHE = 10_000
export const CLOCK_TOLERANCE_SECONDS = 5

export const makeTokenVerifier = (options: VerifierOptions): TokenVerifier["Service"] => {
  const cache = new Map<string, Principal>()
  const tolerance = options.clockToleranceSeconds ?? CLOCK_TOLERANCE_SECONDS
  // OIDC_ISSUER_URL is read without its trailing slashes (Config.ts); a provider whose issuer ends in
  // one (Auth0's does) puts it in `iss`: the same issuer either way (docs/troubleshooting.md).
  const issuer = options.issuer.replace(/\/+$/, "")
  const verifyOptions = {
    issuer: [issuer, `${issuer}/`],
    algorithms: ASYMMETRIC_ALGORITHMS,
    clockTolerance: tolerance,
    ...(options.audience !== undefined ? { audience: options.audience } : {})
  }
  const maxEntries = Math.max(1, options.cacheSize ?? MAX_CACHE)
  const remember = (token: string, principal: Principal) => {
    // Insertion order: the oldest entry is the first key (its token also expires first, as a rule).
    while (cache.size >= maxEntries) {
      const oldest = cache.keys().next()
      if (oldest.done === true) break
      cache.delete(oldest.value)
      tokenCacheEvictionsTotal.inc()
    }
    cache.set(token, principal)
    tokenCacheEntries.set(cache.size)
  }
  const verifyUncached = (token: string) =>
    Effect.tryPromise({
      try: async () => {
        const { payload } = typeof options.key === "function"
          ? await jwtVerify(token, options.key, verifyOptions)
          : await jwtVerify(token, options.key, verifyOptions)
        const typ = payload["typ"]
        if (typeof payload.sub !== "string" || payload.sub === "" || typeof payload.exp !== "number") {
          throw new errors.JWTClaimValidationFailed("missing sub or exp", payload)
        }
        // Keycloak marks refresh tokens "Refresh" and ID tokens "ID": neither is a bearer token.
        if (typ !== undefined && (typeof typ !== "string" || typ.toLowerCase() !== "bearer")) {
          throw new errors.JWTClaimValidationFailed("not an access token", payload, "typ")
        }
        const username = typeof payload["preferred_username"] === "string" ? payload["preferred_username"] : payload.sub
        return {
          id: payload.sub,
          username,
          roles: rolesOf(payload, options.clientId),
          expiresAt: payload.exp
        } satisfies Principal
      },
      catch: (error) => new TokenRejected({ reason: error instanceof errors.JWTExpired ? "expired" : "invalid" })
    })
  const verify = (token: string): Effect.Effect<Principal, TokenRejected> =>
    Effect.suspend(() => {
      const cached = cache.get(token)
      if (cached !== undefined) {
        if ((cached.expiresAt + tolerance) * 1000 > Date.now()) {
          tokenValidationTotal.inc({ status: "valid" })
          return Effect.succeed(cached)
        }
        cache.delete(token)
        tokenCacheEntries.set(cache.size)
        tokenValidationTotal.inc({ status: "invalid" })
        return Effect.fail(new TokenRejected({ reason: "expired" }))
      }
      return verifyUncached(token).pipe(
        Effect.tap((principal) =>
          Effect.sync(() => {
            remember(token, principal)
            tokenValidationTotal.inc({ status: "valid" })
          })
        ),
        Effect.tapError(() => Effect.sync(() => tokenValidationTotal.inc({ status: "invalid" })))
      )
    })
  return { verify }
}

/** A bare JWT from `Bearer <jwt>` (case-insensitive scheme), or undefined. */
export const bearerToken = (header: string | undefined): string | undefined => {
  if (header === undefined) return undefined
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header)
  return match?.[1]
}
