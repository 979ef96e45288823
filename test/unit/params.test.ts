import { Either, Schema } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { parseOriginList } from "../../src/Config.ts"
import { AuthorName } from "../../src/Domain/Author.ts"
import { IntFromString } from "../../src/Http/Params.ts"

const decodeInt = Schema.decodeUnknownEither(IntFromString)
const decodeName = Schema.decodeUnknownEither(AuthorName)

describe("IntFromString", () => {
  it("accepts decimal safe integers only", () => {
    fc.assert(fc.property(fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }), (n) => {
      expect(decodeInt(String(n))).toEqual(Either.right(n))
    }))
    for (const bad of ["", "abc", "1.5", "1e3", "0x10", "9007199254740993", "Infinity", "NaN", "1 2"]) {
      expect(Either.isLeft(decodeInt(bad)), bad).toBe(true)
    }
  })
})

describe("AuthorName (CONTRACT §9)", () => {
  it("trims and keeps 1–255 code points, stored as given", () => {
    expect(decodeName("  Ada  ")).toEqual(Either.right("Ada"))
    expect(decodeName("😀".repeat(255))).toEqual(Either.right("😀".repeat(255)))
    expect(decodeName("e\u0301")).toEqual(Either.right("e\u0301")) // no normalisation
    for (const bad of ["", "   ", "x".repeat(256), "😀".repeat(256), "a\u0000b", 5, null]) {
      expect(Either.isLeft(decodeName(bad)), JSON.stringify(bad)).toBe(true)
    }
  })
})

describe("parseOriginList (ALLOWED_WS_ORIGINS)", () => {
  it("reads comma-separated and JSON-array forms", () => {
    expect(parseOriginList("*")).toEqual(Either.right(["*"]))
    expect(parseOriginList(" https://a.example , https://b.example ,")).toEqual(Either.right(["https://a.example", "https://b.example"]))
    expect(parseOriginList("[\"https://a.example\"]")).toEqual(Either.right(["https://a.example"]))
    expect(Either.isLeft(parseOriginList("[1, 2]"))).toBe(true)
    expect(Either.isLeft(parseOriginList("[oops"))).toBe(true)
  })
})
