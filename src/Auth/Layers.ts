import { Effect, Layer, Option } from "effect"
import { AppConfig } from "../Config.js"
import { BuiltinAuthLive } from "./BuiltinProvider.js"
import { OidcAuthLive } from "./OidcProvider.js"

/** `TokenVerifier` + `IdentityProvider`: OIDC when `OIDC_ISSUER_URL` is set, else the built-in provider. */
export const AuthLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) => Option.isSome(config.oidcIssuerUrl) ? OidcAuthLive : BuiltinAuthLive)
)
