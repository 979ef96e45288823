/**
 * An external OpenID Connect provider (Keycloak in production): discovery, its JWKS with key
 * rotation and outage tolerance (Jwks.ts), and the token endpoint for `/login` (password grant)
 * and `/login/refresh` (refresh_token grant). Every request to the provider has a deadline.
 *
 * Whether it can serve (docs/operations.md#health-and-probes): its keys are fetched at start,
 * again and again until they come, and until then the instance is not ready; `/health`'s
 * `identity` is healthy while the keys are held or can be fetched. Its failures — a key fetch, a
 * login answered 503 because the provider did not answer — are an outage of the identity
 * provider, logged once when it begins and once when it ends (docs/operations.md#outages).
 */
import { Duration, Effect, Option, Redacted, Schedule } from "effect"
import { AppConfig, tokenAudience } from "../Config.ts"
import { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../Errors.ts"
import { IdentityProbe } from "../Observability/Health.ts"
import { Outages } from "../Observability/Outages.ts"
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
  /** Told of each request the provider did not answer as a provider should (`operation`: what failed). */
  readonly onUnavailable?: (cause: unknown, operation: string) => void
  /** Told of each answer of the provider (a key set, a token endpoint's answer). */
  readonly onAnswered?: () => void
}

/** A provider's answer that is not one (a 5xx, a page that is not the JSON it should be). */
class ProviderAnswer extends Error {}

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
    ...(options.onJwksFetchError !== undefined ? { onFetchError: options.onJwksFetchError } : {}),
    ...(options.onAnswered !== undefined ? { onFetched: options.onAnswered } : {})
  })

  const verifier = makeTokenVerifier({
    key: getKey,
    issuer: options.issuerUrl,
    audience: options.audience,
    clientId: options.clientId
  })

  /** The provider did not answer as one should: told, then `IdentityProviderUnavailable` (503). */
  const unavailable = (operation: string) => (cause: unknown) => {
    options.onUnavailable?.(cause, operation)
    return IdentityProviderUnavailable.instance
  }

  const tokenRequest = <E>(operation: string, params: Record<string, string>, rejected: E) =>
    Effect.gen(function*() {
      const failed = unavailable(operation)
      const doc = yield* Effect.tryPromise({ try: discover, catch: failed })
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
        catch: failed
      })
      const json = yield* Effect.tryPromise({
        try: () => response.json() as Promise<Record<string, unknown>>,
        catch: (cause) => failed(new ProviderAnswer(`the token endpoint answered ${response.status} with a body that is not JSON`, { cause }))
      })
      if (response.status === 400 || response.status === 401) {
        options.onAnswered?.()
        return yield* Effect.fail(rejected)
      }
      if (!response.ok || typeof json["access_token"] !== "string") {
        return yield* Effect.fail(failed(new ProviderAnswer(`the token endpoint answered ${response.status} without an access token`)))
      }
      options.onAnswered?.()
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
      tokenRequest("POST /login", { grant_type: "password", username, password, scope: "openid" }, InvalidCredentials.instance),
    refresh: (refreshToken: string) =>
      tokenRequest("POST /login/refresh", { grant_type: "refresh_token", refresh_token: refreshToken }, InvalidRefreshToken.instance)
  }
  return { provider, verifier, keys: getKey }
}

/** How often start-up fetches the keys again while the provider does not answer: 1 s, doubling to 30 s. */
const keysRetry = Schedule.exponential("1 second").pipe(
  Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, Duration.seconds(30))))
)

/**
 * The provider at OIDC_ISSUER_URL (`IdentityProvider.layer`), with its `IdentityProbe`: its keys
 * fetched at start on a fiber of the layer's scope, tried again until they come.
 */
export const makeOidcProvider = Effect.gen(function*() {
  const config = yield* AppConfig
  const issuerUrl = yield* Option.match(config.oidcIssuerUrl, {
    onNone: () => Effect.die(new Error("OIDC_ISSUER_URL is not set")),
    onSome: Effect.succeed
  })
  const outages = yield* Outages
  const context = yield* Effect.context<never>()
  const run = Effect.runForkWith(context)
  const { provider, verifier, keys } = makeOidc({
    issuerUrl,
    clientId: config.oidcClientId,
    clientSecret: config.oidcClientSecret,
    audience: tokenAudience(config),
    // A failed key fetch begins an outage of the provider (logged once); the fetches that fail
    // during it — retries, checks — are not operations that failed, and only a debug line says so.
    onJwksFetchError: (error, kept) =>
      void run(Effect.andThen(
        outages.ongoing("identity")
          ? Effect.void
          : kept
          ? outages.failed("identity", error, "refreshing its signing keys", "the keys fetched before stay in use")
          : outages.failed("identity", error, "fetching its signing keys", "/readyz answers 503 until they are fetched"),
        Effect.logDebug(kept ? "JWKS refresh failed; keeping the cached keys" : "JWKS fetch failed", error)
      )),
    // Each login is its own failure, even when two joined one discovery fetch (one error object):
    // reported in a wrapper of its own, so the tracker counts both.
    onUnavailable: (cause, operation) =>
      void run(outages.failed("identity", { cause }, operation, "answered 503 Identity provider unavailable")),
    onAnswered: () => {
      if (outages.ongoing("identity")) void run(outages.recovered("identity"))
    }
  })
  // The provider's keys now, or the fetch's failure (a check: bounded by /health's 1 s from outside).
  const fetchKeys = Effect.tryPromise({ try: keys.fetchNow, catch: (error) => error })
  yield* outages.watch("identity", fetchKeys, `the identity provider ${issuerUrl}`)
  // Not ready until the keys were fetched once (docs/operations.md#health-and-probes); a failure
  // is the beginning of an outage, logged once with the provider's URL and the cause.
  yield* Effect.forkScoped(fetchKeys.pipe(
    Effect.retry(keysRetry),
    Effect.andThen(Effect.logInfo(`Identity provider ${issuerUrl}: signing keys fetched`)),
    Effect.ignore
  ))
  const probe: IdentityProbe["Service"] = {
    check: Effect.suspend(() => (keys.held() ? Effect.void : fetchKeys))
  }
  return { provider, verifier, probe }
})
