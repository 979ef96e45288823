import { Option } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { decodeCursor, encodeCursor, pageCount } from "../../src/Domain/Pagination.ts"

describe("pagination rules", () => {
  it("pages = ceil(total / per_page), 0 when total is 0", () => {
    expect(pageCount(0, 20)).toBe(0)
    expect(pageCount(1, 20)).toBe(1)
    expect(pageCount(20, 20)).toBe(1)
    expect(pageCount(21, 20)).toBe(2)
    fc.assert(fc.property(fc.nat(1_000_000), fc.integer({ min: 1, max: 1000 }), (total, per) => {
      const pages = pageCount(total, per)
      expect(pages * per).toBeGreaterThanOrEqual(total)
      expect(total === 0 ? pages === 0 : (pages - 1) * per < total).toBe(true)
    }))
  })

  it("a cursor round-trips any safe id and is URL-safe", () => {
    fc.assert(fc.property(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), (id) => {
      const cursor = encodeCursor(id)
      expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/)
      expect(decodeCursor(cursor)).toEqual(Option.some(id))
    }))
  })

  it("reads any text of the cursor alphabet as Node's base64url decoder does", () => {
    const reference = (cursor: string) => {
      const match = /^a:(\d{1,16})$/.exec(Buffer.from(cursor, "base64url").toString("utf8"))
      return match === null || !Number.isSafeInteger(Number(match[1])) ? Option.none() : Option.some(Number(match[1]))
    }
    const alphabet = fc.constantFrom(..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    const near = fc.tuple(fc.nat(), fc.string({ unit: alphabet, maxLength: 2 })).map(([id, tail]) => encodeCursor(id) + tail)
    fc.assert(fc.property(fc.oneof(fc.string({ unit: alphabet, minLength: 1, maxLength: 32 }), near.filter((c) => c.length <= 32)), (cursor) => {
      expect(decodeCursor(cursor)).toEqual(reference(cursor))
    }), { numRuns: 2000 })
    expect(encodeCursor(123_456)).toBe(Buffer.from("a:123456").toString("base64url"))
  })

  it("anything else is not a cursor", () => {
    for (const bad of ["", "null", "zzz", "a:1", Buffer.from("b:1").toString("base64url"), Buffer.from("a:-1").toString("base64url"),
      Buffer.from("a:99999999999999999").toString("base64url"), "x".repeat(100), "YTox=="]) {
      expect(decodeCursor(bad), bad).toEqual(Option.none())
    }
    fc.assert(fc.property(fc.string(), (s) => {
      const decoded = decodeCursor(s)
      if (Option.isSome(decoded)) expect(encodeCursor(decoded.value)).toBe(s)
    }))
  })
})
