/**
 * The audit journal's layout in Redis (docs/audit.md#the-redis-journal), for the writer
 * (StreamWriter.ts, through JournalStore.ts). Three layouts:
 *
 * - v3, the one written: JOURNAL_SHARDS streams `<prefix>audit:{s<i>}:stream`, each with its record
 *   count `<prefix>audit:{s<i>}:records`. The two keys of a shard share a hash tag, so the one
 *   script that appends to and deletes from a shard (JOURNAL_LUA) names keys of one slot, which a
 *   Redis Cluster requires; a writer appends to the shards in turn, so its appends spread over 16
 *   slots (over every primary of a cluster) instead of loading one. The number is fixed, whatever
 *   the topology: one server, a Sentinel group and a cluster hold the same keys. An entry holds the
 *   records appended together: fields `n` (how many), `b` (the batch: an id its writer made, unique)
 *   and `r` (a JSON array of the records, each with its `entry_id`). A burst of concurrent requests
 *   costs one XADD and later one deleted id.
 * - v2, `<prefix>audit:stream:v2` and its count `<prefix>audit:stream:v2:records`: entries like
 *   v3's without `b`, in one stream. Written by instances that write v2, during a rolling update
 *   from them (never in a cluster, where those buffered in the process); read back (the recovery
 *   scan) and deleted, never written.
 * - v1, `<prefix>audit:stream`: one entry per record, fields `id` (its `entry_id`) and `e` (the
 *   record). Likewise read and deleted, never written.
 *
 * A record's JSON carries `request_data` as the object it is, spliced in as the text it was
 * captured as (RequestData.ts): nothing is serialized twice.
 */
import type { AuditEntry, StoredEntry } from "./Entry.ts"
import { requestDataJson } from "./RequestData.ts"

/** How many v3 shards there are: at least the primaries of any cluster the service is likely to meet, and fixed. */
export const JOURNAL_SHARDS = 16

/** A v3 shard, by its hash tag. */
export type ShardStream = `s${number}`
/** A stream with a record count: a v3 shard, or v2. */
export type CountedStream = ShardStream | "v2"
/** A journal stream, by its layout (v3: its shard). */
export type JournalStream = CountedStream | "v1"

/** The v3 shards, in the order a writer appends to them. */
export const SHARDS: ReadonlyArray<ShardStream> = Array.from({ length: JOURNAL_SHARDS }, (_, i): ShardStream => `s${i}`)

/** A stream's key under a prefix. */
export const streamKey = (prefix: string, stream: JournalStream): string =>
  stream === "v1" ? `${prefix}audit:stream` : stream === "v2" ? `${prefix}audit:stream:v2` : `${prefix}audit:{${stream}}:stream`

/** The key of a stream's record count (in its stream's slot for a v3 shard). */
export const countKey = (prefix: string, stream: CountedStream): string =>
  stream === "v2" ? `${prefix}audit:stream:v2:records` : `${prefix}audit:{${stream}}:records`

/**
 * KEYS: a stream, its record count. ARGV: the new entry's record count (`0`: no entry), its records
 * (a JSON array) and its batch id, then pairs (entry id, batch id) to delete. Returns the new
 * entry's id (`""`: none) and the records the stream then holds.
 *
 * An entry is deleted only when it is still the one its deleter appended or read: its `b` is the
 * batch id given (`""` for an entry without one, v2's). After a failover to a replica that lagged,
 * the new primary may issue again the ids of entries it never received, to other entries: deleting
 * by id alone would delete those, whose records only their writer holds. An id whose entry is gone
 * (deleted already, by a scan or twice, or lost in a failover) deletes nothing and counts nothing.
 * The count subtracts what the deleted entry says it held (`n`; 0 when that is not a plain count
 * under 10⁹). It is forgotten when the stream is empty, so a count that went wrong (the stream
 * deleted by hand, a failover) is right again once it drains; a count lost while entries remain (the
 * key evicted) only makes the cap looser until then.
 */
export const JOURNAL_LUA = `local id = ''
local change = 0
if ARGV[1] ~= '0' then
  id = redis.call('XADD', KEYS[1], '*', 'n', ARGV[1], 'b', ARGV[3], 'r', ARGV[2])
  change = tonumber(ARGV[1])
end
for i = 4, #ARGV, 2 do
  local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if found then
    local batch, n = '', 0
    local fields = found[2]
    for j = 1, #fields, 2 do
      if fields[j] == 'b' then
        batch = fields[j + 1]
      elseif fields[j] == 'n' then
        n = tonumber(fields[j + 1]) or 0
      end
    end
    if batch == ARGV[i + 1] then
      redis.call('XDEL', KEYS[1], ARGV[i])
      if n >= 0 and n < 1e9 and n == math.floor(n) then change = change - n end
    end
  end
end
if #ARGV > 3 and redis.call('XLEN', KEYS[1]) == 0 then
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
 * A stream entry read back: its id, its batch id (`b`; `""` when it has none, as v2 and v1 entries),
 * the records it holds, the record count it was counted with in the stream's total (`n`), and how
 * many records it held that could not be read (at least 1 when none could: an entry is never
 * deleted unread without being counted).
 */
export interface JournalEntry {
  readonly id: string
  readonly batch: string
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

/** An entry of any layout (`r`: v3 and v2, many records; `id` and `e`: v1, one), or of none (none readable). */
const decodeEntry = (id: string, fields: Map<string, string>): JournalEntry => {
  const n = Number(fields.get("n") ?? 0)
  const counted = Number.isSafeInteger(n) && n > 0 ? n : 0
  const many = parseJson(fields.get("r"))
  const items = Array.isArray(many) ? many : []
  const records = fields.has("r")
    ? items.flatMap((raw: unknown) => decodeRecord((raw as { entry_id?: unknown } | null)?.entry_id, raw) ?? [])
    : [decodeRecord(fields.get("id"), parseJson(fields.get("e")))].flatMap((r) => r ?? [])
  const unreadable = Math.max(counted, items.length, fields.has("e") ? 1 : 0) - records.length
  return { id, batch: fields.get("b") ?? "", records, counted, unreadable: records.length === 0 ? Math.max(1, unreadable) : unreadable }
}

/** `[[id, [field, value, …]], …]` as XRANGE returns them. */
export const parseJournal = (raw: unknown): Array<JournalEntry> => {
  if (!Array.isArray(raw)) return []
  return raw.flatMap((item): Array<JournalEntry> =>
    Array.isArray(item) && typeof item[0] === "string" ? [decodeEntry(item[0], fieldMap(item[1]))] : []
  )
}
