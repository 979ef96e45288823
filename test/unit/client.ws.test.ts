/**
 * The parts of the /web client that stand in for Node APIs (src/Client/WsProtocol.ts): request ids where
 * `crypto.randomUUID` is missing (a browser page that is not a secure context has only
 * `getRandomValues`), and the token's `exp` read with `atob` (base64url, UTF-8 claims).
 */
import { afterEach, describe, expect, it, vi } from "vitest"
import { randomUuid, tokenExpiry, WsClosedError } from "../../src/Client/WsProtocol.ts"

const V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

const jwt = (payload: unknown) =>
  ["e30", Buffer.from(JSON.stringify(payload), "utf8").toString("base64url"), "sig"].join(".")

describe("the /web client's portable helpers", () => {
  afterEach(() => void vi.unstubAllGlobals())

  it("makes v4 UUIDs with getRandomValues alone when randomUUID is missing", () => {
    const real = globalThis.crypto
    const getRandomValues = vi.fn((array: Uint8Array) => real.getRandomValues(array))
    vi.stubGlobal("crypto", { getRandomValues })
    const ids = Array.from({ length: 200 }, () => randomUuid())
    expect(ids.every((id) => V4.test(id))).toBe(true)
    expect(new Set(ids).size).toBe(ids.length)
    expect(getRandomValues).toHaveBeenCalledTimes(200)
  })

  it("uses randomUUID where it exists", () => {
    vi.stubGlobal("crypto", { randomUUID: () => "00000000-0000-4000-8000-000000000001", getRandomValues: () => { throw new Error("unused") } })
    expect(randomUuid()).toBe("00000000-0000-4000-8000-000000000001")
  })

  it("rejects with an Error carrying a _tag, as the kit's other errors do", () => {
    const error = new WsClosedError(4001, "Session expired")
    expect(error).toBeInstanceOf(Error)
    expect(error).toMatchObject({ _tag: "WsClosedError", name: "WsClosedError", code: 4001, reason: "Session expired" })
    expect(error.message).toBe("WebSocket closed: 4001 Session expired")
  })

  it("reads exp from a base64url payload with non-ASCII claims, and nothing from a malformed token", () => {
    // "é?>" etc. put `-` and `_` into the base64url text.
    expect(tokenExpiry(jwt({ exp: 1_900_000_000, name: "Zoë ~?>~?>", sub: "ü" }))).toBe(1_900_000_000_000)
    expect(jwt({ exp: 1, x: "~?>~?>~?>" }).split(".")[1]).toMatch(/[-_]/)
    expect(tokenExpiry(jwt({ exp: 1, x: "~?>~?>~?>" }))).toBe(1000)
    expect(tokenExpiry(jwt({ sub: "no exp" }))).toBeUndefined()
    expect(tokenExpiry("not a token")).toBeUndefined()
    expect(tokenExpiry("a.!!!.c")).toBeUndefined()
  })
})
