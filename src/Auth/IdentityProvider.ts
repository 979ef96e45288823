import { Context, type Effect } from "effect"
import type { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../Errors.ts"
import type { TokenResponse } from "./Api.ts"

/** Exchanges credentials for tokens: Keycloak's token endpoint, or the built-in development provider. */
export class IdentityProvider extends Context.Service<IdentityProvider, {
  readonly kind: "oidc" | "builtin"
  readonly login: (
    username: string,
    password: string
  ) => Effect.Effect<TokenResponse, InvalidCredentials | IdentityProviderUnavailable>
  readonly refresh: (refreshToken: string) => Effect.Effect<TokenResponse, InvalidRefreshToken | IdentityProviderUnavailable>
}>()("Auth/IdentityProvider") {}
