/** `POST /login` and `POST /login/refresh` (CONTRACT §3). */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Wire } from "../Errors.ts"

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

const Credential = Schema.String.check(Schema.isMaxLength(1024))

export const LoginRequest = Schema.Struct({ username: Credential, password: Credential })
export const RefreshRequest = Schema.Struct({ refresh_token: Schema.String.check(Schema.isMaxLength(16384)) })

export class LoginApi extends HttpApiGroup.make("login")
  .add(
    HttpApiEndpoint.post("login", "/login", {
      payload: LoginRequest,
      success: TokenResponse,
      // The 429 of failed-login slowing (CONTRACT §4): the handler answers it itself, to add Retry-After.
      error: [Wire.InvalidCredentials, Wire.IdentityProviderUnavailable, Wire.TooManyFailedLogins]
    })
      .annotate(OpenApi.Summary, "Exchange a username and password for tokens"),
    HttpApiEndpoint.post("refresh", "/login/refresh", {
      payload: RefreshRequest,
      success: TokenResponse,
      error: [Wire.InvalidRefreshToken, Wire.IdentityProviderUnavailable]
    })
      .annotate(OpenApi.Summary, "Exchange a refresh token for new tokens")
  )
  .annotate(OpenApi.Title, "Login")
{}
