/**
 * The audit journal's layout in Redis (docs/audit.md#the-redis-journal), for StreamWriter.ts.
 *
 * - `<prefix>audit:stream:v2`, written by this release: one entry per batch of records appended
 *   together, fields `n` (how many records) and `r` (a JSON array of them, each with its
 *   `entry_id`). A burst of concurrent requests costs one XADD and later one XDEL id.
 * - `<prefix>audit:stream:v2:records`: how many records its entries hold, so that the stream's cap
 *   (`streamMax`) counts records, as it did when an entry was a record. Kept by the one script
 *   that appends to and deletes from the stream (JOURNAL_LUA), in the same step.
 * - `<prefix>audit:stream`, the previous release's stream: one entry per record, fields `id` (its
 *   `entry_id`) and `e` (the record). Written by instances of that release during a rolling
 *   update; this release only reads it back (the recovery scan) and deletes what it wrote.
 *
 * A record's JSON carries `request_data` as the object it is, spliced in as the text it was
 * captured as (RequestData.ts): nothing is serialized twice.
 */
import type { AuditEntry, StoredEntry } from "./Entry.ts"
import { requestDataJson } from "./RequestData.ts"

/** The stream keys under a prefix. */
export const journalKeys = (prefix: string) => ({
  /** The previous release's single-record entries: read and deleted, never written. */
  legacy: `${prefix}audit:stream`,
  /** This release's entries of many records. */
  current: `${prefix}audit:stream:v2`,
  /** The number of records in `current`'s entries. */
  records: `${prefix}audit:stream:v2:records`
})

/**
 * KEYS: the stream, its record count. ARGV: the new entry's record count (`0`: no entry) and its
 * records (a JSON array), then pairs (entry id, its record count) to delete. Returns the new
 * entry's id (`""`: none) and the records the stream then holds. An id deleted already (by a scan,
 * or sent twice) deletes nothing and counts nothing. The count is forgotten when the stream is
 * empty, so a count that went wrong (the stream deleted by hand) is right again once it drains;
 * a count lost while entries remain (the key evicted) only makes the cap looser until then.
 */
export const JOURNAL_LUA = `local id = ''
local change = 0
if ARGV[1] ~= '0' then
  id = redis.call('XADD', KEYS[1], '*', 'n', ARGV[1], 'r', ARGV[2])
  change = tonumber(ARGV[1])
end
for i = 3, #ARGV, 2 do
  change = change - redis.call('XDEL', KEYS[1], ARGV[i]) * tonumber(ARGV[i + 1])
end
if #ARGV > 2 and redis.call('XLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
  return {id, 0}
end
local held = redis.call('INCRBY', KEYS[2], change)
if held < 0 then
  redis.call('SET', KEYS[2], 0)
  held = 0
end
return {id, held}
`

/** One record's JSON text, its `entry_id` first. */
export const encodeRecord = ({ entryId, entry: e }: StoredEntry): string => {
  const fields: Omit<AuditEntry, "timestamp" | "request_data"> & { readonly entry_id: string; readonly timestamp: string } = {
    entry_id: entryId,
    timestamp: e.timestamp.toISOString(),
    user_id: e.user_id,
    username: e.username,
    user_roles: e.user_roles,
    action_type: e.action_type,
    resource: e.resource,
    outcome: e.outcome,
    ip_address: e.ip_address,
    user_agent: e.user_agent,
    request_id: e.request_id,
    correlation_id: e.correlation_id,
    response_status: e.response_status,
    duration_ms: e.duration_ms,
    error_message: e.error_message
  }
  return `${JSON.stringify(fields).slice(0, -1)},"request_data":${requestDataJson(e.request_data)}}`
}

/** The `r` field of an entry: its records' JSON texts as one JSON array. */
export const encodeRecords = (records: ReadonlyArray<StoredEntry>): string => `[${records.map(encodeRecord).join(",")}]`

type RawRecord = Omit<AuditEntry, "timestamp"> & { timestamp: string; entry_id?: unknown }

const toStored = (entryId: string, { entry_id: _, ...raw }: RawRecord): StoredEntry => ({
  entryId,
  entry: { ...raw, timestamp: new Date(raw.timestamp), request_data: raw.request_data ?? {} }
})

/**
 * A stream entry read back: its id, the records it holds (none when unreadable: not one of ours,
 * deleted unwritten) and the record count it was counted with in the stream's total.
 */
export interface JournalEntry {
  readonly id: string
  readonly records: ReadonlyArray<StoredEntry>
  readonly counted: number
}

const fieldMap = (fields: unknown) => {
  const map = new Map<string, string>()
  if (Array.isArray(fields)) for (let i = 0; i + 1 < fields.length; i += 2) map.set(String(fields[i]), String(fields[i + 1]))
  return map
}

const parseJson = (json: string | undefined): unknown => {
  if (json === undefined) return undefined
  try {
    return JSON.parse(json)
  } catch {
    return undefined
  }
}

/** An entry's records, in either layout (`r`: this release's; `id` and `e`: the previous one's). */
const decodeRecords = (fields: Map<string, string>): ReadonlyArray<StoredEntry> => {
  const many = parseJson(fields.get("r"))
  if (Array.isArray(many)) {
    return many.flatMap((raw: RawRecord) =>
      raw !== null && typeof raw === "object" && typeof raw.entry_id === "string" ? [toStored(raw.entry_id, raw)] : []
    )
  }
  const entryId = fields.get("id")
  const one = parseJson(fields.get("e")) as RawRecord | undefined
  return entryId !== undefined && one !== null && typeof one === "object" ? [toStored(entryId, one)] : []
}

/** `[[id, [field, value, …]], …]` as XRANGE returns them. */
export const parseJournal = (raw: unknown): Array<JournalEntry> => {
  if (!Array.isArray(raw)) return []
  return raw.flatMap((item): Array<JournalEntry> => {
    if (!Array.isArray(item) || typeof item[0] !== "string") return []
    const fields = fieldMap(item[1])
    const counted = Number(fields.get("n") ?? 0)
    return [{ id: item[0], records: decodeRecords(fields), counted: Number.isSafeInteger(counted) ? counted : 0 }]
  })
}
