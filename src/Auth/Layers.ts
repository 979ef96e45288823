import { Effect, Layer, Option } from "effect"
import { AppConfig } from "../Config.ts"
import { BuiltinAuthLive } from "./BuiltinProvider.ts"
import { OidcAuthLive } from "./OidcProvider.ts"

/** `TokenVerifier` + `IdentityProvider`: OIDC when `OIDC_ISSUER_URL` is set, else the built-in provider. */
export const AuthLive = Layer.unwrap(
  Effect.map(AppConfig, (config) => Option.isSome(config.oidcIssuerUrl) ? OidcAuthLive : BuiltinAuthLive)
)
