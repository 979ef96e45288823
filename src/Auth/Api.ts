/** `POST /login` and `POST /login/refresh` (docs/http-api.md#logging-in). */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { issue } from "../Domain/Params.ts"
import { Wire } from "../Errors.ts"

/** The token response (docs/http-api.md#logging-in). */
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

/**
 * The same credentials as an OAuth2 password grant (RFC 6749 §4.3.2), the form Swagger UI's
 * "Authorize" dialog posts (`grant_type=password&username=…&password=…`). `grant_type`, when
 * sent, must be `password`; `scope` and client credentials are taken and not used.
 */
export const LoginForm = Schema.Struct({
  grant_type: Schema.optionalKey(
    Schema.Literal("password").annotate({ message: issue("string_pattern_mismatch", "String should match pattern '^password$'") })
  ),
  username: Credential,
  password: Credential,
  scope: Schema.optionalKey(Credential),
  client_id: Schema.optionalKey(Credential),
  client_secret: Schema.optionalKey(Credential)
}).pipe(HttpApiSchema.asFormUrlEncoded())
export const RefreshRequest = Schema.Struct({ refresh_token: Schema.String.check(Schema.isMaxLength(16384)) })

export class LoginApi extends HttpApiGroup.make("login")
  .add(
    HttpApiEndpoint.post("login", "/login", {
      payload: [LoginRequest, LoginForm],
      success: TokenResponse,
      // The 429 of failed-login slowing (docs/errors-and-limits.md#failed-logins): the handler answers it itself, to add Retry-After.
      error: [Wire.InvalidCredentials, Wire.IdentityProviderUnavailable, Wire.TooManyFailedLogins]
    })
      .annotate(OpenApi.Summary, "Exchange a username and password for tokens")
      .annotate(
        OpenApi.Description,
        "The credentials come as JSON or as an OAuth2 password grant (`application/x-www-form-urlencoded`: `grant_type=password`, " +
          "`username`, `password`), which is how the \"Authorize\" dialog of `/docs` logs in."
      ),
    HttpApiEndpoint.post("refresh", "/login/refresh", {
      payload: RefreshRequest,
      success: TokenResponse,
      error: [Wire.InvalidRefreshToken, Wire.IdentityProviderUnavailable]
    })
      .annotate(OpenApi.Summary, "Exchange a refresh token for new tokens")
  )
  .annotate(OpenApi.Title, "Login")
{}
