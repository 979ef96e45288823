import { Context, Effect, Layer } from "effect"
import type { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../Errors.ts"
import type { TokenResponse } from "./Api.ts"
import { makeBuiltinProvider } from "./BuiltinProvider.ts"
import { makeOidcProvider } from "./OidcProvider.ts"
import { TokenVerifier } from "./TokenVerifier.ts"

/** One provider's two services: its logins, and the verifier of the tokens it issues. */
const withVerifier = (made: { readonly provider: IdentityProvider["Service"]; readonly verifier: TokenVerifier["Service"] }) =>
  Context.make(IdentityProvider, made.provider).pipe(Context.add(TokenVerifier, made.verifier))

/**
 * Exchanges credentials for tokens: Keycloak's token endpoint, or the built-in development provider.
 * Its Layers also provide the `TokenVerifier` of the same provider's tokens.
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
