/**
 * The benchmark's own signing key, installed as the built-in identity provider's key
 * (`$DATA_DIR/dev-idp-key.json`, format of src/Auth/BuiltinProvider.ts), and long-lived tokens
 * minted as test/support/TestApp.ts `signToken` does. The baseline gets the public half.
 */
import { exportJWK, generateKeyPair, type JWK, SignJWT, type CryptoKey } from "jose"
import { randomUUID } from "node:crypto"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { BUILTIN_ISSUER } from "../../src/Auth/BuiltinProvider.ts"

/** Every role a workload needs: reads, creates, renames and deletes (W10), the audit listing (W8). */
export const BENCH_ROLES = ["get-authors", "create-author", "update-author", "delete-author", "admin"]

export interface BenchKey {
  readonly privateKey: CryptoKey
  readonly privateJwk: JWK
  readonly publicJwk: JWK
  readonly kid: string
}

export const makeKey = async (): Promise<BenchKey> => {
  const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true })
  const kid = randomUUID()
  return {
    privateKey,
    kid,
    privateJwk: { ...(await exportJWK(privateKey)), kid, alg: "ES256" },
    publicJwk: { ...(await exportJWK(publicKey)), kid, alg: "ES256" }
  }
}

/** Makes `dataDir` the built-in provider's home with our key (the service reads it at start). */
export const installServiceKey = (dataDir: string, key: BenchKey) => {
  mkdirSync(dataDir, { recursive: true })
  writeFileSync(join(dataDir, "dev-idp-key.json"), JSON.stringify(key.privateJwk), { mode: 0o600 })
}

export const writePublicKey = (path: string, key: BenchKey) => writeFileSync(path, JSON.stringify(key.publicJwk))

export const mintToken = (key: BenchKey, sub: string, roles: ReadonlyArray<string> = BENCH_ROLES, lifetime = "24h") =>
  new SignJWT({ typ: "Bearer", sub, preferred_username: sub, roles: [...roles] })
    .setProtectedHeader({ alg: "ES256", kid: key.kid })
    .setIssuer(BUILTIN_ISSUER)
    .setAudience("author-directory")
    .setSubject(sub)
    .setIssuedAt()
    .setExpirationTime(lifetime)
    .sign(key.privateKey)

/** One token per bench user (`bench-user-<i>`), so the limiter and the token cache see many users. */
export const mintTokens = (key: BenchKey, users: number) =>
  Promise.all(Array.from({ length: users }, (_, i) => mintToken(key, `bench-user-${i}`)))
