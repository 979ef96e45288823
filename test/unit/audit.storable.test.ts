/**
 * What the audit writer hands PostgreSQL (a record the database refuses never stops the
 * trail: docs/audit.md#guarantees): every value a client can send is reduced to one the database takes.
 */
import { describe, expect, it } from "vitest"
import type { AuditEntry } from "../../src/AuditLogs/Entry.ts"
import { captureRequestData } from "../../src/AuditLogs/RequestData.ts"
import {
  INDEXED_TEXT_MAX_BYTES,
  minimalEntry,
  storableJsonText,
  storableText,
  toColumns,
  toRow,
  truncateUtf8
} from "../../src/AuditLogs/Storable.ts"

const bytes = (s: string) => Buffer.byteLength(s, "utf8")

const entry: AuditEntry = {
  timestamp: new Date(0),
  user_id: "",
  username: "雨".repeat(1024),
  user_roles: ["admin"],
  action_type: "POST",
  resource: "/" + "x".repeat(3000),
  outcome: "error",
  ip_address: "127.0.0.1",
  user_agent: "a\u0000b",
  request_id: "r",
  correlation_id: "c",
  response_status: 401,
  duration_ms: 1,
  request_data: { body: { "k\u0000": "\ud800", nested: ["\u0000"] } },
  error_message: null
}

describe("audit records reduced to what PostgreSQL stores", () => {
  it("truncates on a code-point boundary to at most the byte budget, marked with …", () => {
    expect(truncateUtf8("short", 10)).toBe("short")
    const cut = truncateUtf8("😀".repeat(100), 50)
    expect(bytes(cut)).toBeLessThanOrEqual(50)
    expect(cut.endsWith("…")).toBe(true)
    expect(cut.slice(0, -1)).toBe("😀".repeat(11)) // 11 × 4 bytes + 3 for the ellipsis
    expect(Buffer.from(cut, "utf8").toString("utf8")).toBe(cut) // no surrogate half left behind
  })

  it("NUL and unpaired surrogates become U+FFFD; paired ones stay", () => {
    expect(storableText("a\u0000b\ud800c\udc00d😀")).toBe("a\ufffdb\ufffdc\ufffdd😀")
  })

  it("indexed columns fit a btree entry; jsonb gets no NUL escape or lone surrogate", () => {
    const row = toRow({ entryId: "e", entry })
    for (const column of [row.username, row.resource, row.user_id, row.action_type]) {
      expect(bytes(column)).toBeLessThanOrEqual(INDEXED_TEXT_MAX_BYTES)
    }
    expect(row.username.startsWith("雨雨雨")).toBe(true)
    expect(row.user_agent).toBe("a\ufffdb")
    expect(JSON.parse(row.request_data)).toEqual({ body: { "k\ufffd": "\ufffd", nested: ["\ufffd"] } })
    expect(row.request_data).not.toContain("\\u0000")
  })

  it("captured request_data (JSON text) is reduced like the object: escaped NUL and lone surrogates become U+FFFD", () => {
    const body = { "k\u0000": "\ud800", nested: ["\u0000", "x\udc00y"], pair: "😀", backslash: "\\u0000 \\ud800", quote: "\"\\" }
    const captured = captureRequestData(undefined, body)
    // JSON.stringify escapes NUL and lone surrogates, which jsonb refuses.
    expect(captured).toContain("\\u0000")
    const row = toRow({ entryId: "e", entry: { ...entry, request_data: captured } })
    expect(JSON.parse(row.request_data)).toEqual({
      body: { "k\ufffd": "\ufffd", nested: ["\ufffd", "x\ufffdy"], pair: "😀", backslash: "\\u0000 \\ud800", quote: "\"\\" }
    })
    expect(row.request_data).not.toMatch(/(?<!\\)\\u(0000|d[89a-f])/i)
    // The same text as the object's own path (Storable reduces a literal object the same way).
    expect(row.request_data).toBe(toRow({ entryId: "e", entry: { ...entry, request_data: { body } } }).request_data)
  })

  it("a JSON text keeps escaped surrogate pairs and other escapes, and over its budget becomes a marker", () => {
    expect(storableJsonText(String.raw`{"a":"\ud83d\ude00","b":"\n\t\u001f","c":"\\u0000"}`, 100))
      .toBe(String.raw`{"a":"\ud83d\ude00","b":"\n\t\u001f","c":"\\u0000"}`)
    expect(storableJsonText(String.raw`{"a":"\u0000\ud800\udc00\udc00"}`, 100)).toBe(`{"a":"\ufffd\\ud800\\udc00\ufffd"}`)
    expect(storableJsonText(JSON.stringify({ a: "é".repeat(100) }), 100)).toBe(JSON.stringify({ _truncated: true }))
  })

  it("a batch's columns hold its rows in order, one array per column", () => {
    const batch = [0, 1, 2].map((n) => ({ entryId: `e${n}`, entry: { ...entry, request_id: `r${n}`, error_message: n === 1 ? "bad\u0000" : null } }))
    const columns = toColumns(batch)
    expect(Object.keys(columns)).toEqual(Object.keys(toRow(batch[0]!)))
    for (const [i, stored] of batch.entries()) {
      const row = toRow(stored)
      for (const key of Object.keys(row) as Array<keyof typeof row>) expect(columns[key][i]).toEqual(row[key])
    }
    expect(columns.error_message).toEqual([null, "bad\ufffd", null])
  })

  it("the last-resort form keeps who, what, when and the outcome, short", () => {
    const { entry: minimal } = minimalEntry({ entryId: "e", entry })
    expect(bytes(minimal.username)).toBeLessThanOrEqual(128)
    expect(bytes(minimal.resource)).toBeLessThanOrEqual(128)
    expect(minimal).toMatchObject({ outcome: "error", response_status: 401, timestamp: new Date(0), request_data: { _unstorable: true } })
  })
})
