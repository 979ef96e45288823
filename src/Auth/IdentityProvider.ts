import { Context, Effect, Layer } from "effect"
import type { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../Errors.ts"
import { IdentityProbe } from "../Observability/Health.ts"
import type { TokenResponse } from "./Api.ts"
import { makeBuiltinProvider } from "./BuiltinProvider.ts"
import { makeOidcProvider } from "./OidcProvider.ts"
import { TokenVerifier } from "./TokenVerifier.ts"

/** One provider's services: its logins, the verifier of the tokens it issues, and (OIDC) its health check. */
const withVerifier = (made: {
  readonly provider: IdentityProvider["Service"]
  readonly verifier: TokenVerifier["Service"]
  readonly probe?: IdentityProbe["Service"]
}) => {
  const context = Context.make(IdentityProvider, made.provider).pipe(Context.add(TokenVerifier, made.verifier))
  return made.probe === undefined ? context : Context.add(context, IdentityProbe, made.probe)
}

/**
 * Exchanges credentials for tokens: Keycloak's token endpoint, or the built-in development provider.
 * Its Layers also provide the `TokenVerifier` of the same provider's tokens, and the OIDC one its
 * `IdentityProbe` (`/health`'s `identity`).
 */
export class IdentityProvider extends Context.Service<IdentityProvider, {
  readonly kind: "oidc" | "builtin"
  readonly login: (
    username: string,
    password: string
  ) => Effect.Effect<TokenResponse, InvalidCredentials | IdentityProviderUnavailable>
  readonly refresh: (refreshToken: string) => Effect.Effect<TokenResponse, InvalidRefreshToken | IdentityProviderUnavailable>
}>()("Auth/IdentityProvider") {
  /** The OIDC provider at OIDC_ISSUER_URL (Keycloak). */
  static readonly layer = Layer.effectContext(Effect.map(makeOidcProvider, withVerifier))
  /** The built-in development provider (AUTH_USERS_FILE); refuses to start in production. */
  static readonly layerEmbedded = Layer.effectContext(Effect.map(makeBuiltinProvider, withVerifier))
}
