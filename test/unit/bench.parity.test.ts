/**
 * `npm run bench` compares the service with an independently written baseline (bench/baseline/):
 * what keeps the comparison honest is that both give the same answers (bench/lib/parity.ts), and
 * that the baseline stays independent. These pin the comparison rules and the baseline's own
 * pieces that decide its answers, without starting a server (the bench itself compares live
 * answers before every run).
 */
import { readdirSync, readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import {
  checkName, containsPattern, correlationId, decodeCursor, encodeCursor, formatTimestamp, isAuthorId, makeMemoryWindow, parseDate, requestData,
  tokenRoles
} from "../../bench/baseline/helpers.ts"
import { compareAnswers, normalize } from "../../bench/lib/compare.ts"

const page = (cursor: string | null) => ({
  items: [{ id: 1, name: "A", created_at: "2026-01-31T12:00:00.000000" }],
  meta: { page: 1, per_page: 1, total: 2, pages: 2, next_cursor: cursor, has_more: cursor !== null }
})
const headers = { "x-correlation-id": "bench-parity", "x-request-id": "r", "x-ratelimit-limit": "70", "x-ratelimit-remaining": "69", "x-ratelimit-reset": "60" }

describe("bench parity: answers are compared, not code", () => {
  it("a success must match in status and body; each server's cursor is compared only as present or null", () => {
    expect(compareAnswers("p", { status: 200, body: page("YToy") }, { status: 200, body: page("YWZ0ZXI6Mg") })).toEqual([])
    expect(compareAnswers("p", { status: 200, body: page("YToy") }, { status: 200, body: page(null) })[0]).toMatch(/^p: bodies differ/)
    const other = { ...page(null), meta: { ...page(null).meta, total: 3 } }
    expect(compareAnswers("p", { status: 200, body: page(null) }, { status: 200, body: other })[0]).toMatch(/bodies differ/)
    expect(compareAnswers("p", { status: 200, body: [] }, { status: 201, body: [] })).toEqual(["p: status 200 (service) vs 201 (baseline)"])
  })

  it("an error is compared by status only: 422 bodies are each server's own wording", () => {
    expect(compareAnswers("e", { status: 422, body: { detail: [{ loc: ["query", "page"] }] } }, { status: 422, body: { detail: "page must be >= 1" } })).toEqual([])
    expect(compareAnswers("e", { status: 422, body: {} }, { status: 400, body: {} })).toHaveLength(1)
  })

  it("volatile fields are checked for their format only; the correlation id and rate-limit headers must be there", () => {
    const format = { created_at: /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}$/ }
    const a = { id: 10001, name: "x", created_at: "2026-11-25T10:00:00.123456" }
    expect(compareAnswers("c", { status: 201, body: a, headers }, { status: 201, body: { ...a, created_at: "2026-11-25T10:00:00.654321" }, headers }, format)).toEqual([])
    expect(compareAnswers("c", { status: 201, body: a }, { status: 201, body: { ...a, created_at: "2026-11-25T10:00:00Z" } }, format)).toHaveLength(1)
    expect(compareAnswers("c", { status: 201, body: a, headers }, { status: 201, body: a, headers: { ...headers, "x-ratelimit-remaining": null } }))
      .toEqual(["c: baseline answered without x-ratelimit-remaining"])
    expect(compareAnswers("c", { status: 401, body: {}, headers: { "x-correlation-id": "other" } }, { status: 401, body: {}, headers }))
      .toEqual(["c: service did not echo the correlation id"])
    expect(normalize({ meta: { next_cursor: "abc" } })).toEqual({ meta: { next_cursor: "<cursor>" } })
  })
})

describe("bench baseline: its own code", () => {
  const dir = new URL("../../bench/baseline/", import.meta.url)
  const sources = readdirSync(dir).filter((f) => f.endsWith(".ts")).map((f) => [f, readFileSync(new URL(f, dir), "utf8")] as const)

  it("imports nothing from the service and knows nothing of its schema", () => {
    expect(sources.length).toBeGreaterThan(0)
    for (const [file, text] of sources) {
      expect(text, file).not.toMatch(/from\s+["'][./]*src\//)
      expect(text, file).not.toMatch(/migrations\//)
      expect(text.includes("author" + "_stats"), file).toBe(false)
    }
  })

  it("formats PostgreSQL timestamps as the API does: microseconds, UTC, no zone", () => {
    expect(formatTimestamp("2026-01-31 12:00:00.123456+00")).toBe("2026-01-31T12:00:00.123456")
    expect(formatTimestamp("2026-01-31 12:00:00+00")).toBe("2026-01-31T12:00:00.000000")
    expect(formatTimestamp("2026-01-31 12:00:00.5+00")).toBe("2026-01-31T12:00:00.500000")
    expect(formatTimestamp("2026-01-01 01:30:00.000001+02")).toBe("2025-12-31T23:30:00.000001")
    expect(formatTimestamp("2026-01-31 12:00:00.25-05:30")).toBe("2026-01-31T17:30:00.250000")
  })

  it("keeps its cursor opaque and refuses what it did not make", () => {
    for (const id of [0, 1, 42, 2_147_483_647]) expect(decodeCursor(encodeCursor(id))).toBe(id)
    for (const bad of ["", "!!", Buffer.from("after:x").toString("base64url"), Buffer.from("after:2147483648").toString("base64url"), "a".repeat(100)]) {
      expect(decodeCursor(bad)).toBeUndefined()
    }
  })

  it("takes search terms literally, keeps requests' data storable and bounded, and reads roles and dates", () => {
    expect(containsPattern("50%_off\\")).toBe("%50\\%\\_off\\\\%")
    expect(JSON.parse(requestData({ q: "a\u0000b", password: "p" }, undefined))).toEqual({ query: { q: "a\ufffdb", password: "[REDACTED]" } })
    const big = requestData(undefined, { name: "x".repeat(10_000) })
    expect(Buffer.byteLength(big)).toBeLessThanOrEqual(8192)
    expect(JSON.parse(big)).toEqual({ body: { truncated_bytes: 10_011 } })
    expect(tokenRoles({ roles: ["a"], realm_access: { roles: ["b"] }, resource_access: { c: { roles: ["c", "a"] } } }, "c")).toEqual(["a", "b", "c"])
    expect(correlationId("ok-1.2_3", () => "new")).toBe("ok-1.2_3")
    expect(correlationId("no spaces", () => "new")).toBe("new")
    expect(parseDate("2026-01-31", true)?.toISOString()).toBe("2026-01-31T23:59:59.999Z")
    expect(parseDate("2026-01-31T10:00:00", false)?.toISOString()).toBe("2026-01-31T10:00:00.000Z")
    expect(parseDate("2026-01-31T10:00:00+02:00", false)?.toISOString()).toBe("2026-01-31T08:00:00.000Z")
    expect(parseDate("2026-02-30", false)).toBeUndefined()
    expect(parseDate("yesterday", false)).toBeUndefined()
  })

  it("takes a create's or rename's name trimmed, 1 to 255 characters, and ids its integer column can hold", () => {
    expect(checkName({ name: "  Ada Lovelace " })).toEqual({ name: "Ada Lovelace" })
    expect(checkName({ name: "\u{1F600}".repeat(255) })).toEqual({ name: "\u{1F600}".repeat(255) }) // code points, not UTF-16 units
    for (const body of [{ name: "   " }, { name: "x".repeat(256) }, { name: "a\u0000b" }]) {
      expect(checkName(body)).toMatchObject({ problem: { type: "string_length", loc: ["body", "name"] } })
    }
    for (const body of [{}, { name: 5 }, null, "Ada"]) expect(checkName(body)).toMatchObject({ problem: { type: "string_type" } })
    for (const id of [1, 42, 2_147_483_647]) expect(isAuthorId(id)).toBe(true)
    for (const id of [0, -1, 2_147_483_648, 4_294_967_296, 1.5]) expect(isAuthorId(id)).toBe(false)
  })

  it("limits with an exact sliding window and reports what the X-RateLimit headers need", () => {
    let now = 1_000_000
    const admit = makeMemoryWindow(60_000, () => now)
    expect(admit("u", 2)).toEqual({ allowed: true, limit: 2, remaining: 1, resetSeconds: 60 })
    now += 30_000
    expect(admit("u", 2)).toEqual({ allowed: true, limit: 2, remaining: 0, resetSeconds: 30 })
    expect(admit("u", 2)).toEqual({ allowed: false, limit: 2, remaining: 0, resetSeconds: 30 })
    now += 30_000 // the first admission leaves the window
    expect(admit("u", 2)).toEqual({ allowed: true, limit: 2, remaining: 0, resetSeconds: 30 })
    expect(admit("other", 2).remaining).toBe(1)
  })
})
