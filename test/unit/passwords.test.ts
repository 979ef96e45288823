import { describe, expect, it } from "vitest"
import { hashPassword, isScryptHash, safeEqual, verifyPassword } from "../../src/Auth/Passwords.ts"

describe("Passwords", () => {
  it("hashes in the documented format and verifies", async () => {
    const hash = await hashPassword("s3cret", 1024, 8, 1)
    expect(isScryptHash(hash)).toBe(true)
    expect(hash.startsWith("scrypt:1024:8:1:")).toBe(true)
    expect(await verifyPassword("s3cret", hash)).toBe(true)
    expect(await verifyPassword("s3cret ", hash)).toBe(false)
  })

  it("salts: the same password hashes differently", async () => {
    expect(await hashPassword("same", 1024)).not.toBe(await hashPassword("same", 1024))
  })

  it.each(["", "scrypt", "md5:1:2:3:a:b", "scrypt:1000:8:1:AAAA:AAAA", "scrypt:x:y:z:AAAA:AAAA", "scrypt:16384:8:1::"])("a malformed or unusable hash is no match, never a crash: %j", async (hash) => {
    expect(await verifyPassword("pw", hash)).toBe(false)
  })

  it("safeEqual compares strings of any length", () => {
    expect(safeEqual("abc", "abc")).toBe(true)
    expect(safeEqual("abc", "abd")).toBe(false)
    expect(safeEqual("abc", "abcd")).toBe(false)
  })
})
