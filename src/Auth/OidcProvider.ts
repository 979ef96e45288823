/**
 * An external OpenID Connect provider (Keycloak in production): discovery, its JWKS with key
 * rotation and outage tolerance (Jwks.ts), and the token endpoint for `/login` (password grant)
 * and `/login/refresh` (refresh_token grant). Every request to the provider has a deadline.
 */
import { Effect, Option, Redacted } from "effect"
import { AppConfig, tokenAudience } from "../Config.ts"
import { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../Errors.ts"
import type { TokenResponse } from "./Api.ts"
import { JWKS_COOLDOWN_MS, JWKS_MAX_AGE_MS, makeJwksCache } from "./Jwks.ts"
import { makeTokenVerifier } from "./TokenVerifier.ts"

interface Discovery {
  readonly issuer: string
  readonly jwks_uri: string
  readonly token_endpoint: string
}

export interface OidcOptions {
  readonly issuerUrl: string
  readonly clientId: string
  readonly clientSecret: Option.Option<Redacted.Redacted<string>>
  /** The audience access tokens must carry (`tokenAudience`); undefined: not checked. */
  readonly audience: string | undefined
  /** The least time between two JWKS fetches (an unknown key id refetches no sooner). */
  readonly jwksCooldownMs?: number
  /** After this age the JWKS is refreshed; a failed refresh keeps the keys (Jwks.ts). */
  readonly jwksMaxAgeMs?: number
  /** The deadline of every request to the provider. */
  readonly timeoutMs?: number
  /** Told of each failed JWKS fetch. */
  readonly onJwksFetchError?: (error: unknown, keptCachedKeys: boolean) => void
}

const isDiscovery = (u: unknown): u is Discovery =>
  typeof u === "object" && u !== null &&
  ["issuer", "jwks_uri", "token_endpoint"].every((k) => typeof (u as Record<string, unknown>)[k] === "string")

export const makeOidc = (options: OidcOptions) => {
  const timeoutMs = options.timeoutMs ?? 5000
  let discovery: Promise<Discovery> | undefined
  /** Discovery is fetched lazily and cached; a failure is not cached, so the next call retries. */
  const discover = () => {
    discovery ??= fetch(`${options.issuerUrl}/.well-known/openid-configuration`, { signal: AbortSignal.timeout(timeoutMs) })
      .then(async (res) => {
        const body: unknown = await res.json()
        if (!res.ok || !isDiscovery(body)) throw new Error(`OIDC discovery failed with status ${res.status}`)
        return body
      })
      .catch((error: unknown) => {
        discovery = undefined
        throw error
      })
    return discovery
  }

  const getKey = makeJwksCache({
    jwksUri: () => discover().then((doc) => doc.jwks_uri),
    maxAgeMs: options.jwksMaxAgeMs ?? JWKS_MAX_AGE_MS,
    cooldownMs: options.jwksCooldownMs ?? JWKS_COOLDOWN_MS,
    timeoutMs,
    ...(options.onJwksFetchError !== undefined ? { onFetchError: options.onJwksFetchError } : {})
  })

  const verifier = makeTokenVerifier({
    key: getKey,
    issuer: options.issuerUrl,
    audience: options.audience,
    clientId: options.clientId
  })

  const tokenRequest = <E>(params: Record<string, string>, rejected: E) =>
    Effect.gen(function*() {
      const doc = yield* Effect.tryPromise({ try: discover, catch: () => IdentityProviderUnavailable.instance })
      const body = new URLSearchParams({ ...params, client_id: options.clientId })
      if (Option.isSome(options.clientSecret)) body.set("client_secret", Redacted.value(options.clientSecret.value))
      const response = yield* Effect.tryPromise({
        try: () =>
          fetch(doc.token_endpoint, {
            method: "POST",
            headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
            body,
            signal: AbortSignal.timeout(timeoutMs)
          }),
        catch: () => IdentityProviderUnavailable.instance
      })
      const json = yield* Effect.tryPromise({
        try: () => response.json() as Promise<Record<string, unknown>>,
        catch: () => IdentityProviderUnavailable.instance
      })
      if (response.status === 400 || response.status === 401) return yield* Effect.fail(rejected)
      if (!response.ok || typeof json["access_token"] !== "string") {
        return yield* Effect.fail(IdentityProviderUnavailable.instance)
      }
      const num = (v: unknown, fallback: number) => typeof v === "number" ? v : fallback
      const result: TokenResponse = {
        access_token: json["access_token"],
        expires_in: num(json["expires_in"], 300),
        refresh_expires_in: num(json["refresh_expires_in"], 1800),
        refresh_token: typeof json["refresh_token"] === "string" ? json["refresh_token"] : "",
        token_type: "Bearer",
        ...(typeof json["scope"] === "string" ? { scope: json["scope"] } : {})
      }
      return result
    })

  const provider = {
    kind: "oidc" as const,
    login: (username: string, password: string) =>
      tokenRequest({ grant_type: "password", username, password, scope: "openid" }, InvalidCredentials.instance),
    refresh: (refreshToken: string) =>
      tokenRequest({ grant_type: "refresh_token", refresh_token: refreshToken }, InvalidRefreshToken.instance)
  }
  return { provider, verifier }
}

/** The provider at OIDC_ISSUER_URL (`IdentityProvider.layer`). */
export const makeOidcProvider = Effect.gen(function*() {
  const config = yield* AppConfig
  const issuerUrl = yield* Option.match(config.oidcIssuerUrl, {
    onNone: () => Effect.die(new Error("OIDC_ISSUER_URL is not set")),
    onSome: Effect.succeed
  })
  const context = yield* Effect.context<never>()
  const log = Effect.runForkWith(context)
  const { provider, verifier } = makeOidc({
    issuerUrl,
    clientId: config.oidcClientId,
    clientSecret: config.oidcClientSecret,
    audience: tokenAudience(config),
    onJwksFetchError: (error, kept) =>
      void log(
        Effect.logWarning(kept ? "JWKS refresh failed; keeping the cached keys" : "JWKS fetch failed").pipe(
          Effect.annotateLogs("reason", error instanceof Error ? error.message : String(error))
        )
      )
  })
  return { provider, verifier }
})
