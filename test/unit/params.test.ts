import { Result, Schema } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { parseOriginList } from "../../src/Config.ts"
import { AuthorName } from "../../src/Domain/Author.ts"
import { documentedAs, IntFromString, IntParam, parameterSchemaOf } from "../../src/Domain/Params.ts"

const decodeInt = Schema.decodeUnknownResult(IntFromString)
const decodeName = Schema.decodeUnknownResult(AuthorName)

describe("IntFromString", () => {
  it("accepts decimal safe integers only", () => {
    fc.assert(fc.property(fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }), (n) => {
      expect(decodeInt(String(n))).toEqual(Result.succeed(n))
    }))
    for (const bad of ["", "abc", "1.5", "1e3", "0x10", "9007199254740993", "Infinity", "NaN", "1 2"]) {
      expect(Result.isFailure(decodeInt(bad)), bad).toBe(true)
    }
  })
})

describe("IntParam", () => {
  it("is checked against the bounds it is documented with, and its default is documented too", () => {
    const param = IntParam({ minimum: 1, maximum: 100 }, { default: 20 })
    const decode = Schema.decodeUnknownResult(param)
    expect(decode("1")).toEqual(Result.succeed(1))
    expect(decode("100")).toEqual(Result.succeed(100))
    for (const bad of ["0", "101", "abc"]) expect(Result.isFailure(decode(bad)), bad).toBe(true)
    expect(parameterSchemaOf(param.ast)).toEqual({ type: "integer", minimum: 1, maximum: 100, default: 20 })
  })

  it("an optional parameter keeps its documented schema; one without documentedAs has none", () => {
    const id = IntFromString.annotate(documentedAs({ type: "integer" }))
    const params = Schema.Struct({ id: Schema.optional(id), plain: Schema.optional(IntFromString) })
    const [documented, plain] = params.ast.propertySignatures
    expect(parameterSchemaOf(documented!.type)).toEqual({ type: "integer" })
    expect(parameterSchemaOf(plain!.type)).toBeUndefined()
  })
})

describe("AuthorName", () => {
  it("trims and keeps 1–255 code points, stored as given", () => {
    expect(decodeName("  Ada  ")).toEqual(Result.succeed("Ada"))
    expect(decodeName("😀".repeat(255))).toEqual(Result.succeed("😀".repeat(255)))
    expect(decodeName("e\u0301")).toEqual(Result.succeed("e\u0301")) // no normalisation
    for (const bad of ["", "   ", "x".repeat(256), "😀".repeat(256), "a\u0000b", 5, null]) {
      expect(Result.isFailure(decodeName(bad)), JSON.stringify(bad)).toBe(true)
    }
  })
})

describe("parseOriginList (ALLOWED_WS_ORIGINS)", () => {
  it("reads comma-separated and JSON-array forms", () => {
    expect(parseOriginList("*")).toEqual(Result.succeed(["*"]))
    expect(parseOriginList(" https://a.example , https://b.example ,")).toEqual(Result.succeed(["https://a.example", "https://b.example"]))
    expect(parseOriginList("[\"https://a.example\"]")).toEqual(Result.succeed(["https://a.example"]))
    expect(Result.isFailure(parseOriginList("[1, 2]"))).toBe(true)
    expect(Result.isFailure(parseOriginList("[oops"))).toBe(true)
  })
})
