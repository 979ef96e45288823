/** `POST /login` and `POST /login/refresh` (CONTRACT §3). */
import { Schema, SchemaTransformation } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Wire } from "../Errors.ts"
import { TokenResponse } from "./IdentityProvider.ts"
import { TooManyFailedLogins } from "./LoginThrottle.ts"

const Credential = Schema.String.check(Schema.isMaxLength(1024))

export const LoginRequest = Schema.Struct({ username: Credential, password: Credential })
/**
 * The 429 of failed-login slowing (CONTRACT §4), `{detail}` on the wire as every error. The
 * handler answers it itself, to add `Retry-After`; declared here for the OpenAPI document.
 */
export const TooManyFailedLoginsWire = Schema.Struct({ detail: Schema.String })
  .annotate({ identifier: "TooManyFailedLoginsError" })
  .pipe(
    Schema.decodeTo(
      Schema.instanceOf(TooManyFailedLogins),
      SchemaTransformation.transform<TooManyFailedLogins, { readonly detail: string }>({
        decode: (body) => new TooManyFailedLogins({ detail: body.detail, retryAfterSeconds: 1 }),
        encode: (error) => ({ detail: error.detail })
      })
    )
  )
  .annotate({ httpApiStatus: 429, description: "Too many failed login attempts for this username (see Retry-After)" })

export const RefreshRequest = Schema.Struct({ refresh_token: Schema.String.check(Schema.isMaxLength(16384)) })

export class LoginApi extends HttpApiGroup.make("login")
  .add(
    HttpApiEndpoint.post("login", "/login", {
      payload: LoginRequest,
      success: TokenResponse,
      error: [Wire.InvalidCredentials, Wire.IdentityProviderUnavailable, TooManyFailedLoginsWire]
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
