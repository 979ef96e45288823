/** `POST /login` and `POST /login/refresh` (CONTRACT §3). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Wire } from "../Errors.ts"
import { TokenResponse } from "./IdentityProvider.ts"

const Credential = Schema.String.pipe(Schema.maxLength(1024))

export const LoginRequest = Schema.Struct({ username: Credential, password: Credential })
export const RefreshRequest = Schema.Struct({ refresh_token: Schema.String.pipe(Schema.maxLength(16384)) })

export class LoginApi extends HttpApiGroup.make("login")
  .add(
    HttpApiEndpoint.post("login", "/login")
      .setPayload(LoginRequest)
      .addSuccess(TokenResponse)
      .addError(Wire.InvalidCredentials)
      .addError(Wire.IdentityProviderUnavailable)
      .annotate(OpenApi.Summary, "Exchange a username and password for tokens")
  )
  .add(
    HttpApiEndpoint.post("refresh", "/login/refresh")
      .setPayload(RefreshRequest)
      .addSuccess(TokenResponse)
      .addError(Wire.InvalidRefreshToken)
      .addError(Wire.IdentityProviderUnavailable)
      .annotate(OpenApi.Summary, "Exchange a refresh token for new tokens")
  )
  .annotate(OpenApi.Title, "Login")
{}
