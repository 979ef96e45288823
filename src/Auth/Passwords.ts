/** `scrypt:<N>:<r>:<p>:<salt base64>:<key base64>` password hashes (docs/configuration.md#users-of-the-built-in-provider). */
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto"

const scryptAsync = (password: string, salt: Buffer, keylen: number, N: number, r: number, p: number) =>
  new Promise<Buffer>((resolve, reject) =>
    scrypt(password, salt, keylen, { N, r, p, maxmem: 256 * N * r + 1024 * 1024 }, (err, key) =>
      err ? reject(err) : resolve(key)
    )
  )

export const hashPassword = async (password: string, N = 16384, r = 8, p = 1): Promise<string> => {
  const salt = randomBytes(16)
  const key = await scryptAsync(password, salt, 32, N, r, p)
  return `scrypt:${N}:${r}:${p}:${salt.toString("base64")}:${key.toString("base64")}`
}

export const isScryptHash = (hash: string) => /^scrypt:\d+:\d+:\d+:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/.test(hash)

export const verifyPassword = async (password: string, hash: string): Promise<boolean> => {
  const [scheme, n, r, p, salt, key] = hash.split(":")
  if (scheme !== "scrypt" || n === undefined || r === undefined || p === undefined || !salt || !key) return false
  const expected = Buffer.from(key, "base64")
  // Parameters scrypt refuses (N not a power of two, too much memory) mean "no match", not a crash.
  const actual = await scryptAsync(password, Buffer.from(salt, "base64"), expected.length, Number(n), Number(r), Number(p))
    .catch(() => undefined)
  return actual !== undefined && actual.length === expected.length && timingSafeEqual(actual, expected)
}

/** Constant-time comparison of two strings of any length. */
export const safeEqual = (a: string, b: string) => {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && timingSafeEqual(left, right)
}
