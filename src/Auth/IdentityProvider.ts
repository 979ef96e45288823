import { Context, type Effect, Schema } from "effect"
import type { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../Errors.ts"

/** INTERFACE §Login request and token response. */
export const TokenResponse = Schema.Struct({
  access_token: Schema.String,
  expires_in: Schema.Int,
  refresh_expires_in: Schema.Int,
  refresh_token: Schema.String,
  token_type: Schema.String,
  scope: Schema.optional(Schema.String)
})
export type TokenResponse = typeof TokenResponse.Type

/** Exchanges credentials for tokens: Keycloak's token endpoint, or the built-in development provider. */
export class IdentityProvider extends Context.Service<IdentityProvider, {
  readonly kind: "oidc" | "builtin"
  readonly login: (
    username: string,
    password: string
  ) => Effect.Effect<TokenResponse, InvalidCredentials | IdentityProviderUnavailable>
  readonly refresh: (refreshToken: string) => Effect.Effect<TokenResponse, InvalidRefreshToken | IdentityProviderUnavailable>
}>()("Auth/IdentityProvider") {}
