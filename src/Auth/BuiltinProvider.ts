/**
 * The built-in development identity provider: users from `AUTH_USERS_FILE`, ES256 tokens signed
 * with a key persisted in `DATA_DIR`, Keycloak's lifetimes (300 s / 1800 s) and claim shapes.
 * It refuses to run with `APP_ENV=production` (docs/configuration.md#production-rules), and says so at startup when users
 * with plain-text passwords (the shipped admin/admin…) are reachable beyond this machine.
 */
import { Data, Effect, Option, Schema } from "effect"
import { exportJWK, generateKeyPair, importJWK, type JWK, jwtVerify, SignJWT, type CryptoKey } from "jose"
import { createHash, randomUUID } from "node:crypto"
import { mkdirSync, readFileSync, writeFileSync, existsSync } from "node:fs"
import { join } from "node:path"
import { AppConfig, productionBecause, tokenAudience } from "../Config.ts"
import { IdentityProviderUnavailable, InvalidCredentials, InvalidRefreshToken } from "../Errors.ts"
import type { TokenResponse } from "./Api.ts"
import { isScryptHash, safeEqual, verifyPassword } from "./Passwords.ts"
import { makeTokenVerifier } from "./TokenVerifier.ts"

export const BUILTIN_ISSUER = "urn:author-directory:dev-idp"
export const ACCESS_TOKEN_SECONDS = 300
export const REFRESH_TOKEN_SECONDS = 1800
const ALG = "ES256"

const UserFields = Schema.Struct({
  username: Schema.String.check(Schema.isMinLength(1)),
  password: Schema.optional(Schema.String),
  password_hash: Schema.optional(Schema.String.check(
    Schema.makeFilter((h: string) => isScryptHash(h) || "password_hash must be scrypt:<N>:<r>:<p>:<salt base64>:<key base64>")
  )),
  roles: Schema.Array(Schema.String),
  id: Schema.optional(Schema.String.check(Schema.isMinLength(1)))
})
const UserEntry = UserFields.check(Schema.makeFilter((u: typeof UserFields.Type) =>
  (u.password !== undefined) !== (u.password_hash !== undefined) || "needs exactly one of password, password_hash"
))
const UsersFile = Schema.Array(UserEntry)
type UserEntry = typeof UserEntry.Type

/** The users file cannot be read or is not a users file: start-up stops, saying why. */
export class StartupError extends Data.TaggedError("StartupError")<{ readonly message: string }> {}

export const loadUsers = (path: string): ReadonlyArray<UserEntry> => {
  let text: string
  try {
    text = readFileSync(path, "utf8")
  } catch (error) {
    throw new StartupError({ message: `AUTH_USERS_FILE: cannot read ${path}: ${(error as Error).message}` })
  }
  try {
    return Schema.decodeUnknownSync(UsersFile)(JSON.parse(text))
  } catch (error) {
    throw new StartupError({ message: `AUTH_USERS_FILE: ${path} is not a valid users file: ${(error as Error).message}` })
  }
}

/** Whether HOST binds to this machine only (`localhost`, 127.0.0.0/8, ::1). */
export const isLoopbackHost = (host: string) =>
  host === "localhost" || host === "::1" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host)

/**
 * The startup warning for plain-text passwords served to the network (the defaults keep
 * `HOST=0.0.0.0` and the shipped admin/admin for development; this says what that means).
 */
export const plainPasswordWarning = (users: ReadonlyArray<UserEntry>, host: string, usersFile: string): string | undefined => {
  const plain = users.filter((u) => u.password !== undefined).map((u) => u.username)
  if (plain.length === 0 || isLoopbackHost(host)) return undefined
  const names = plain.length > 5 ? `${plain.slice(0, 5).join(", ")}, …` : plain.join(", ")
  return `Built-in identity provider: ${usersFile} has plain-text passwords (${names}) and HOST=${host} serves them ` +
    "beyond this machine; bind HOST=127.0.0.1 or give the users password_hash entries (npm run hash-password)"
}

/** A stable id for users without one: a UUID-shaped digest of the username. */
const stableId = (username: string) => {
  const h = createHash("sha256").update(`author-directory:${username}`).digest("hex")
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`
}

interface SigningKey {
  readonly privateKey: CryptoKey
  readonly publicKey: CryptoKey
  readonly kid: string
}

/** Loads the signing key from `DATA_DIR`, or creates and persists one (owner-readable only). */
const loadOrCreateKey = async (dataDir: string): Promise<SigningKey> => {
  const path = join(dataDir, "dev-idp-key.json")
  if (existsSync(path)) {
    const jwk = JSON.parse(readFileSync(path, "utf8")) as JWK & { kid: string }
    const { d: _d, ...publicJwk } = jwk
    return {
      privateKey: await importJWK(jwk, ALG) as CryptoKey,
      publicKey: await importJWK(publicJwk, ALG) as CryptoKey,
      kid: jwk.kid
    }
  }
  const { privateKey, publicKey } = await generateKeyPair(ALG, { extractable: true })
  const kid = randomUUID()
  mkdirSync(dataDir, { recursive: true })
  writeFileSync(path, JSON.stringify({ ...(await exportJWK(privateKey)), kid, alg: ALG }), { mode: 0o600 })
  return { privateKey, publicKey, kid }
}

/**
 * The built-in development provider (`IdentityProvider.layerEmbedded`): users from AUTH_USERS_FILE,
 * tokens signed with a key kept in DATA_DIR.
 */
export const makeBuiltinProvider = Effect.gen(function*() {
  const config = yield* AppConfig
  if (config.appEnv === "production") {
    return yield* Effect.die(new Error(
      `The built-in identity provider is for development only: set OIDC_ISSUER_URL when ${productionBecause(config)}`
    ))
  }
  const users = yield* Effect.try({ try: () => loadUsers(config.authUsersFile), catch: (e) => e as Error }).pipe(Effect.orDie)
  const warning = plainPasswordWarning(users, config.host, config.authUsersFile)
  if (warning !== undefined) yield* Effect.logWarning(warning)
  const key = yield* Effect.promise(() => loadOrCreateKey(config.dataDir))
  // Its tokens name OIDC_AUDIENCE (else the client id), and it checks that audience unless
  // OIDC_AUDIENCE=none (docs/configuration.md#settings).
  const audience = tokenAudience(config) ?? config.oidcClientId
  const verifier = makeTokenVerifier({
    key: key.publicKey,
    issuer: BUILTIN_ISSUER,
    audience: Option.isNone(config.oidcAudience) ? audience : tokenAudience(config),
    clientId: config.oidcClientId
  })
  const byName = new Map(users.map((u) => [u.username, u]))
  // Compared against when the user is unknown, so both paths cost one scrypt.
  const dummyHash = "scrypt:16384:8:1:AAAAAAAAAAAAAAAAAAAAAA==:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

  const sign = (user: UserEntry, typ: "Bearer" | "Refresh", seconds: number, sid: string) =>
    new SignJWT({
      typ,
      preferred_username: user.username,
      realm_access: { roles: [...user.roles] },
      azp: config.oidcClientId,
      sid,
      scope: "openid profile email"
    })
      .setProtectedHeader({ alg: ALG, kid: key.kid, typ: "JWT" })
      .setSubject(user.id ?? stableId(user.username))
      .setIssuer(BUILTIN_ISSUER)
      .setAudience(audience)
      .setIssuedAt()
      .setExpirationTime(`${seconds}s`)
      .setJti(randomUUID())
      .sign(key.privateKey)

  const issue = (user: UserEntry) =>
    Effect.tryPromise({
      try: async (): Promise<TokenResponse> => {
        const sid = randomUUID()
        return {
          access_token: await sign(user, "Bearer", ACCESS_TOKEN_SECONDS, sid),
          expires_in: ACCESS_TOKEN_SECONDS,
          refresh_expires_in: REFRESH_TOKEN_SECONDS,
          refresh_token: await sign(user, "Refresh", REFRESH_TOKEN_SECONDS, sid),
          token_type: "Bearer",
          scope: "openid profile email"
        }
      },
      catch: () => IdentityProviderUnavailable.instance
    })

  const checkPassword = (user: UserEntry | undefined, password: string) =>
    Effect.promise(async () => {
      if (user?.password !== undefined) return safeEqual(password, user.password)
      return (await verifyPassword(password, user?.password_hash ?? dummyHash)) && user !== undefined
    })

  const provider = {
    kind: "builtin" as const,
    login: (username: string, password: string) =>
      Effect.gen(function*() {
        const user = byName.get(username)
        const ok = yield* checkPassword(user, password)
        if (!ok || user === undefined) return yield* Effect.fail(InvalidCredentials.instance)
        return yield* issue(user)
      }),
    refresh: (refreshToken: string) =>
      Effect.gen(function*() {
        const payload = yield* Effect.tryPromise({
          try: () => jwtVerify(refreshToken, key.publicKey, { issuer: BUILTIN_ISSUER, algorithms: [ALG] }),
          catch: () => InvalidRefreshToken.instance
        })
        const claims = payload.payload
        if (claims["typ"] !== "Refresh" || typeof claims["preferred_username"] !== "string") {
          return yield* Effect.fail(InvalidRefreshToken.instance)
        }
        const user = byName.get(claims["preferred_username"])
        if (user === undefined || (user.id ?? stableId(user.username)) !== claims.sub) {
          return yield* Effect.fail(InvalidRefreshToken.instance)
        }
        return yield* issue(user)
      })
  }
  return { provider, verifier }
})
