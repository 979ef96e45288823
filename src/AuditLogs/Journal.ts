/**
 * The audit journal's layout in Redis (docs/audit.md#the-redis-journal), for the writer
 * (StreamWriter.ts, through JournalStore.ts). Two layouts:
 *
 * - v2, `<prefix>audit:stream:v2`, the one written: one entry per batch of records appended
 *   together, fields `n` (how many records) and `r` (a JSON array of them, each with its
 *   `entry_id`). A burst of concurrent requests costs one XADD and later one XDEL id.
 * - `<prefix>audit:stream:v2:records`: how many records its entries hold, so that the stream's cap
 *   (`streamMax`) counts records, as it did when an entry was a record. Kept by the one script
 *   that appends to and deletes from the stream (JOURNAL_LUA), in the same step.
 * - v1, `<prefix>audit:stream`: one entry per record, fields `id` (its `entry_id`) and `e` (the
 *   record). Written by instances that write v1, during a rolling update from them; read back
 *   (the recovery scan) and deleted, never written.
 *
 * A record's JSON carries `request_data` as the object it is, spliced in as the text it was
 * captured as (RequestData.ts): nothing is serialized twice.
 */
import type { AuditEntry, StoredEntry } from "./Entry.ts"
import { requestDataJson } from "./RequestData.ts"

/** The stream keys under a prefix. */
export const journalKeys = (prefix: string) => ({
  /** v1: single-record entries, read and deleted, never written. */
  v1: `${prefix}audit:stream`,
  /** v2: entries of many records. */
  v2: `${prefix}audit:stream:v2`,
  /** The number of records in v2's entries. */
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

const isText = (value: unknown): value is string => typeof value === "string"
const isCount = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value)

/**
 * One record read back, or undefined when it is not one: every field of its type, a timestamp that
 * is a date. What a record was written with is what it reads back as; anything else (a record
 * edited by hand, another program's entry) is unreadable, counted and logged by the scan that finds
 * it (docs/audit.md#guarantees), never written half-decoded.
 */
const decodeRecord = (entryId: unknown, raw: unknown): StoredEntry | undefined => {
  if (!isText(entryId) || raw === null || typeof raw !== "object" || Array.isArray(raw)) return undefined
  const r = raw as Record<string, unknown>
  const timestamp = isText(r["timestamp"]) ? new Date(r["timestamp"]) : undefined
  const roles = r["user_roles"]
  const data = r["request_data"] ?? {}
  const error = r["error_message"] ?? null
  const texts = ["user_id", "username", "action_type", "resource", "outcome", "ip_address", "user_agent", "request_id", "correlation_id"]
  if (
    timestamp === undefined || Number.isNaN(timestamp.getTime()) || !texts.every((k) => isText(r[k])) ||
    !Array.isArray(roles) || !roles.every(isText) || !isCount(r["response_status"]) || !isCount(r["duration_ms"]) ||
    data === null || typeof data !== "object" || Array.isArray(data) || (error !== null && !isText(error))
  ) return undefined
  const { entry_id: _, ...fields } = r
  return { entryId, entry: { ...fields, timestamp, request_data: data, error_message: error } as AuditEntry }
}

/**
 * A stream entry read back: its id, the records it holds, the record count it was counted with in
 * the stream's total (`n`), and how many records it held that could not be read (at least 1 when
 * none could: an entry is never deleted unread without being counted).
 */
export interface JournalEntry {
  readonly id: string
  readonly records: ReadonlyArray<StoredEntry>
  readonly counted: number
  readonly unreadable: number
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

/** An entry of either layout (`r`: v2, many records; `id` and `e`: v1, one), or of neither (none readable). */
const decodeEntry = (id: string, fields: Map<string, string>): JournalEntry => {
  const n = Number(fields.get("n") ?? 0)
  const counted = Number.isSafeInteger(n) && n > 0 ? n : 0
  const many = parseJson(fields.get("r"))
  const items = Array.isArray(many) ? many : []
  const records = fields.has("r")
    ? items.flatMap((raw: unknown) => decodeRecord((raw as { entry_id?: unknown } | null)?.entry_id, raw) ?? [])
    : [decodeRecord(fields.get("id"), parseJson(fields.get("e")))].flatMap((r) => r ?? [])
  const unreadable = Math.max(counted, items.length, fields.has("e") ? 1 : 0) - records.length
  return { id, records, counted, unreadable: records.length === 0 ? Math.max(1, unreadable) : unreadable }
}

/** `[[id, [field, value, …]], …]` as XRANGE returns them. */
export const parseJournal = (raw: unknown): Array<JournalEntry> => {
  if (!Array.isArray(raw)) return []
  return raw.flatMap((item): Array<JournalEntry> =>
    Array.isArray(item) && typeof item[0] === "string" ? [decodeEntry(item[0], fieldMap(item[1]))] : []
  )
}
