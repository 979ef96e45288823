/**
 * `request_data` of an audit record (CONTRACT §6, §9): `{query, body}`, secrets redacted at any
 * depth, at most 8 KiB of JSON.
 */
export const REQUEST_DATA_MAX_BYTES = 8192

const SECRET_KEYS = new Set([
  "password", "passwd", "secret", "token", "access_token", "refresh_token", "authorization", "api_key",
  "client_secret", "credit_card", "card_number", "cvv", "ssn"
])

export const isSecretKey = (key: string) => SECRET_KEYS.has(key.toLowerCase())

export const redact = (value: unknown, depth = 0): unknown => {
  if (depth > 32) return "[TRUNCATED]"
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1))
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {}
    for (const [key, v] of Object.entries(value)) out[key] = isSecretKey(key) ? "[REDACTED]" : redact(v, depth + 1)
    return out
  }
  return value
}

const byteLength = (value: unknown) => Buffer.byteLength(JSON.stringify(value) ?? "", "utf8")

/**
 * The JSON size of each captured `request_data`, measured once by `captureRequestData` (which
 * serializes it anyway to enforce the 8 KiB bound), so the audit buffer can bound its memory
 * without serializing the record again (Writer.ts).
 */
const capturedBytes = new WeakMap<object, number>()

const measured = (data: Record<string, unknown>, bytes: number) => {
  capturedBytes.set(data, bytes)
  return data
}

/** `request_data`'s JSON size in bytes: known for captured data; measured otherwise (small literals). */
export const requestDataBytes = (data: Record<string, unknown>): number => capturedBytes.get(data) ?? byteLength(data)

/** Builds the captured data; an oversized part is replaced by a marker with its size. */
export const captureRequestData = (
  query: Record<string, string | ReadonlyArray<string>> | undefined,
  body: unknown
): Record<string, unknown> => {
  const data: Record<string, unknown> = {}
  if (query !== undefined && Object.keys(query).length > 0) data["query"] = redact(query)
  if (body !== undefined && body !== null) data["body"] = redact(body)
  let bytes = byteLength(data)
  if (bytes <= REQUEST_DATA_MAX_BYTES) return measured(data, bytes)
  for (const part of ["body", "query"] as const) {
    if (data[part] !== undefined) {
      data[part] = { _truncated: true, _bytes: byteLength(data[part]) }
      bytes = byteLength(data)
      if (bytes <= REQUEST_DATA_MAX_BYTES) return measured(data, bytes)
    }
  }
  return measured({ _truncated: true }, 17)
}
