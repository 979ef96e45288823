import { describe, expect, it } from "vitest"
import { bearerToken, rolesOf } from "../../src/Auth/TokenVerifier.ts"
import { likePattern } from "../../src/Authors/Repo.ts"

describe("bearerToken (CONTRACT §3, §9 non-bearer schemes)", () => {
  it("takes the token of a Bearer header, case-insensitively", () => {
    expect(bearerToken("Bearer abc.def.ghi")).toBe("abc.def.ghi")
    expect(bearerToken("bearer abc")).toBe("abc")
    expect(bearerToken("BEARER \tabc ")).toBe("abc")
  })

  it("refuses other schemes, blanks and junk", () => {
    for (const header of [undefined, "", "Bearer", "Bearer ", "Basic YTpi", "Token abc", "Bearer a b", "Bearerabc", "abc"]) {
      expect(bearerToken(header), String(header)).toBeUndefined()
    }
  })
})

describe("rolesOf (CONTRACT §3 roles from tokens)", () => {
  it("unions realm_access, resource_access[client] and top-level roles, without duplicates", () => {
    expect(rolesOf({
      realm_access: { roles: ["a", "b"] },
      resource_access: { client: { roles: ["b", "c"] }, other: { roles: ["x"] } },
      roles: ["d", 5]
    }, "client")).toEqual(["a", "b", "c", "d"])
  })

  it("ignores malformed claims", () => {
    expect(rolesOf({ realm_access: "admin", resource_access: { client: null }, roles: "admin" }, "client")).toEqual([])
    expect(rolesOf({}, "client")).toEqual([])
  })
})

describe("likePattern", () => {
  it("escapes LIKE wildcards so search is a literal substring", () => {
    expect(likePattern("100%_x\\")).toBe("%100\\%\\_x\\\\%")
    expect(likePattern("plain")).toBe("%plain%")
  })
})
