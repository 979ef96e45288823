/**
 * The audit journal's entry layouts (src/AuditLogs/Journal.ts, docs/audit.md#the-redis-journal):
 * a v3 entry holds its records as a JSON array and its batch id, and reads back as they were
 * written (a v2 entry, without a batch id, as one whose batch id is ""); a v1 entry
 * (one record, fields `id` and `e`) reads back as its one record; what cannot be read — an entry
 * of neither layout, not JSON, a record without its entry_id or with a field of the wrong type or
 * a timestamp that is no date — reads back as unreadable records, counted: the records its `n`
 * says it held, at least 1.
 */
import { describe, expect, it } from "vitest"
import type { AuditEntry, StoredEntry } from "../../src/AuditLogs/Entry.ts"
import { encodeRecords, parseJournal } from "../../src/AuditLogs/Journal.ts"
import { captureRequestData } from "../../src/AuditLogs/RequestData.ts"

const entry = (n: number): AuditEntry => ({
  timestamp: new Date(1_700_000_000_000 + n), user_id: "u1", username: "user", user_roles: ["admin"], action_type: "GET",
  resource: `/authors/${n}`, outcome: "success", ip_address: "127.0.0.1", user_agent: "test", request_id: `r${n}`,
  correlation_id: "c", response_status: 200, duration_ms: 1, request_data: {}, error_message: null
})

/** A record as it reads back: `request_data` as the object its captured text is. */
const readBack = ({ entryId, entry: e }: StoredEntry) => ({
  entryId,
  entry: { ...e, request_data: typeof e.request_data === "string" ? JSON.parse(e.request_data) : e.request_data }
})

describe("audit journal entries", () => {
  it("an entry of many records reads back as its records, request_data captured text included", () => {
    const records: Array<StoredEntry> = [
      { entryId: "a", entry: entry(1) },
      { entryId: "b", entry: { ...entry(2), request_data: captureRequestData({ q: "x" }, { password: "p", name: "\u0000" }), error_message: "bad \"x\"" } }
    ]
    const [read, v2] = parseJournal([["1-0", ["n", "2", "b", "batch-1", "r", encodeRecords(records)]], ["1-1", ["n", "2", "r", encodeRecords(records)]]])
    expect(read).toEqual({ id: "1-0", batch: "batch-1", counted: 2, unreadable: 0, records: records.map(readBack) })
    expect(read!.records[1]!.entry.request_data).toEqual({ query: { q: "x" }, body: { password: "[REDACTED]", name: "\u0000" } })
    expect(v2).toEqual({ ...read, id: "1-1", batch: "" })
  })

  it("a v1 entry reads back as its one record", () => {
    const json = JSON.stringify({ ...entry(3), timestamp: entry(3).timestamp.toISOString() })
    expect(parseJournal([["2-0", ["id", "c", "e", json]]])).toEqual([{ id: "2-0", batch: "", counted: 0, unreadable: 0, records: [{ entryId: "c", entry: entry(3) }] }])
  })

  it("what cannot be read is counted: an entry of neither layout, not JSON, records without their entry_id, at least 1", () => {
    const withoutId = JSON.stringify([{ ...entry(4), timestamp: entry(4).timestamp.toISOString() }])
    expect(parseJournal([
      ["3-0", ["x", "y"]],
      ["4-0", ["n", "3", "r", "not json"]],
      ["5-0", ["n", "1", "r", withoutId]],
      ["6-0", ["id", "d", "e", "{"]],
      ["7-0", ["n", "x", "r", "[1, 2]"]]
    ])).toEqual([
      { id: "3-0", batch: "", counted: 0, unreadable: 1, records: [] },
      { id: "4-0", batch: "", counted: 3, unreadable: 3, records: [] },
      { id: "5-0", batch: "", counted: 1, unreadable: 1, records: [] },
      { id: "6-0", batch: "", counted: 0, unreadable: 1, records: [] },
      { id: "7-0", batch: "", counted: 0, unreadable: 2, records: [] }
    ])
    expect(parseJournal("not an array")).toEqual([])
  })

  it("a record with a field of the wrong type, or a timestamp that is no date, is unreadable; the entry's other records read back", () => {
    const good: StoredEntry = { entryId: "g", entry: entry(5) }
    const raw = JSON.parse(encodeRecords([good])) as Array<Record<string, unknown>>
    const bad = [
      { ...raw[0], entry_id: "t", timestamp: "yesterday" },
      { ...raw[0], entry_id: "s", response_status: "200" },
      { ...raw[0], entry_id: "u", user_roles: "admin" },
      { ...raw[0], entry_id: "d", request_data: [1] }
    ]
    const [read] = parseJournal([["8-0", ["n", "5", "r", JSON.stringify([raw[0], ...bad])]]])
    expect(read).toEqual({ id: "8-0", batch: "", counted: 5, unreadable: 4, records: [readBack(good)] })
  })
})
