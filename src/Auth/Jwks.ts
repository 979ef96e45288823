/**
 * The identity provider's verification keys (docs/deployment.md#identity-provider): fetched from
 * its JWKS endpoint, each fetch with a deadline, and kept for as long as the provider is
 * unreachable — an outage of the identity provider never turns valid tokens into 401s.
 *
 * - No keys yet: the first token waits for the fetch (a failure fails that token; the next retries).
 * - Keys older than `maxAgeMs`: they are still used at once, and a refetch runs in the background
 *   (at most one per `cooldownMs`); when it fails, the keys it would have replaced stay.
 * - A token naming a key id the set does not hold (key rotation): the set is refetched and the
 *   token checked again, at most once per `cooldownMs`, so forged key ids cannot hammer the provider.
 *
 * jose's `createRemoteJWKSet` refetches after its cache age and then fails every token while the
 * provider is down; this keeps the last good set instead.
 *
 * Whether a set is held and a fetch now are part of the cache too (`held`, `fetchNow`): the
 * identity provider's health and readiness (docs/operations.md#health-and-probes) are "its keys
 * are held or can be fetched".
 */
import { createLocalJWKSet, errors, type JSONWebKeySet, type JWTVerifyGetKey } from "jose"

export interface JwksCacheOptions {
  /** Where the set is (resolved lazily: OIDC discovery). */
  readonly jwksUri: () => Promise<string>
  /** After this age the set is refreshed in the background (default 10 minutes). */
  readonly maxAgeMs?: number
  /** The least time between two fetches, except for the first set (default 30 s). */
  readonly cooldownMs?: number
  /** The deadline of each fetch, body included (default 5 s). */
  readonly timeoutMs?: number
  /** The clock (default `Date.now`). */
  readonly now?: () => number
  /** Told of each failed fetch (the cached keys, if any, stay in use). */
  readonly onFetchError?: (error: unknown, keptCachedKeys: boolean) => void
  /** Told of each good fetch (the provider answered). */
  readonly onFetched?: () => void
}

/** jose's key getter, with the cache's state. */
export interface JwksCache extends JWTVerifyGetKey {
  /** Whether a key set was fetched once (it stays, whatever the provider does later). */
  readonly held: () => boolean
  /** Fetches the set now (or joins the fetch under way), whatever its age and the cooldown. */
  readonly fetchNow: () => Promise<void>
}

export const JWKS_MAX_AGE_MS = 10 * 60_000
export const JWKS_COOLDOWN_MS = 30_000
export const JWKS_TIMEOUT_MS = 5000

interface KeySet {
  readonly getKey: JWTVerifyGetKey
  readonly fetchedAt: number
}

export const makeJwksCache = (options: JwksCacheOptions): JwksCache => {
  const maxAgeMs = options.maxAgeMs ?? JWKS_MAX_AGE_MS
  const cooldownMs = options.cooldownMs ?? JWKS_COOLDOWN_MS
  const timeoutMs = options.timeoutMs ?? JWKS_TIMEOUT_MS
  const now = options.now ?? (() => Date.now())

  let current: KeySet | undefined
  let lastAttempt = Number.NEGATIVE_INFINITY
  let inFlight: Promise<KeySet> | undefined

  const fetchSet = async (): Promise<KeySet> => {
    const uri = await options.jwksUri()
    const response = await fetch(uri, { headers: { accept: "application/json" }, signal: AbortSignal.timeout(timeoutMs) })
    if (!response.ok) throw new Error(`JWKS fetch failed with status ${response.status}`)
    const body: unknown = await response.json()
    // createLocalJWKSet checks the shape ({keys: [...]}) and throws JWKSInvalid otherwise.
    return { getKey: createLocalJWKSet(body as JSONWebKeySet), fetchedAt: now() }
  }

  /** One fetch at a time; a good set replaces the current one, a failure leaves it. */
  const refresh = (): Promise<KeySet> => {
    inFlight ??= (async () => {
      lastAttempt = now()
      try {
        current = await fetchSet()
        options.onFetched?.()
        return current
      } catch (error) {
        options.onFetchError?.(error, current !== undefined)
        throw error
      } finally {
        inFlight = undefined
      }
    })()
    return inFlight
  }

  const coolingDown = () => now() - lastAttempt < cooldownMs

  const getKey: JWTVerifyGetKey = async (header, token) => {
    const set = current ?? await refresh()
    if (now() - set.fetchedAt >= maxAgeMs && !coolingDown()) {
      // Background: this token is checked with the keys at hand, whatever the provider does.
      refresh().catch(() => {})
    }
    try {
      return await set.getKey(header, token)
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey)) throw error
      // An unknown key id: perhaps a rotated key. Refetch once (or join the fetch under way);
      // unreachable → the token is refused.
      const pending = inFlight ?? (coolingDown() ? undefined : refresh())
      if (pending === undefined) throw error
      const fresh = await pending.catch(() => {
        throw error
      })
      return fresh.getKey(header, token)
    }
  }
  return Object.assign(getKey, {
    held: () => current !== undefined,
    fetchNow: () => refresh().then(() => undefined)
  })
}
