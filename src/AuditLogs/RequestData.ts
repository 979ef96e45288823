/**
 * `request_data` of an audit record (CONTRACT §6, §9): `{query, body}`, secrets redacted at any
 * depth, at most 8 KiB of JSON.
 */
export const REQUEST_DATA_MAX_BYTES = 8192

/** CONTRACT §6: values of keys matching these names are redacted. */
const SECRET_NAMES: ReadonlyArray<string> = [
  "password", "passwd", "secret", "token", "access_token", "refresh_token", "authorization", "api_key",
  "client_secret", "credit_card", "card_number", "cvv", "ssn"
]

/** A name without separators (`api_key` → `apikey`), as a run of a key's words is compared with it. */
const SECRET_RUNS = new Set(SECRET_NAMES.flatMap((name) => {
  const run = name.replaceAll("_", "")
  return [run, `${run}s`]
}))
/** The longest name in words (`access_token`: 2); longer runs of a key's words cannot equal one. */
const MAX_RUN_WORDS = Math.max(...SECRET_NAMES.map((name) => name.split("_").length))

/** A key that spells no name's letters in a row, separators removed, matches none. */
const MAY_NAME_A_SECRET = new RegExp(SECRET_NAMES.map((name) => name.replaceAll("_", "")).join("|"), "i")

/** A key's words: split at separators, camelCase humps and letter/digit changes, lower-cased. */
const wordsOf = (key: string): Array<string> =>
  key
    .replace(/(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])/g, " ")
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((word) => word !== "")

/**
 * Whether a key *matches* a secret name (CONTRACT §6: case-insensitive): some run of its words
 * spells the name, in any case and with any separator — `password`, `user_password`,
 * `newPassword`, `X-Api-Key`, `apikey`, `Access-Token`, `creditCardNumber`, `cvv2`, a plural
 * (`tokens`) — but a word that merely contains one does not (`secretary`, `classname`, `tokenizer`).
 */
export const isSecretKey = (key: string): boolean => {
  // Most keys (every log line's ids) contain no secret's letters at all: settled in one test.
  if (!MAY_NAME_A_SECRET.test(key.replace(/[^A-Za-z0-9]+/g, ""))) return false
  const words = wordsOf(key)
  for (let start = 0; start < words.length; start++) {
    let run = ""
    for (let end = start; end < words.length && end < start + MAX_RUN_WORDS; end++) {
      run += words[end]
      if (SECRET_RUNS.has(run)) return true
    }
  }
  return false
}

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

/**
 * `request_data` as captured: its JSON text (secrets redacted, at most 8 KiB), built once, when the
 * bound is enforced, and then carried as it is by the stream entry and the INSERT (StreamWriter.ts,
 * Storable.ts) and measured by the buffer's bound (Writer.ts) without serializing it again.
 */
export type CapturedRequestData = string & { readonly CapturedRequestData: unique symbol }

/** A record's `request_data`: captured (its JSON text), or a small literal object a site builds itself. */
export type RequestData = CapturedRequestData | Readonly<Record<string, unknown>>

/** The JSON text of a record's `request_data`. */
export const requestDataJson = (data: RequestData): string => typeof data === "string" ? data : JSON.stringify(data)

const jsonOf = (value: unknown) => JSON.stringify(value) ?? ""
/** A UTF-16 unit is at most 3 bytes of UTF-8: most texts are settled without counting. */
const fits = (json: string) => json.length * 3 <= REQUEST_DATA_MAX_BYTES || Buffer.byteLength(json, "utf8") <= REQUEST_DATA_MAX_BYTES

/** Builds the captured data; an oversized part is replaced by a marker with its size. */
export const captureRequestData = (
  query: Record<string, string | ReadonlyArray<string>> | undefined,
  body: unknown
): CapturedRequestData => {
  const data: Record<string, unknown> = {}
  if (query !== undefined && Object.keys(query).length > 0) data["query"] = redact(query)
  if (body !== undefined && body !== null) data["body"] = redact(body)
  let json = jsonOf(data)
  if (fits(json)) return json as CapturedRequestData
  for (const part of ["body", "query"] as const) {
    if (data[part] !== undefined) {
      data[part] = { _truncated: true, _bytes: Buffer.byteLength(jsonOf(data[part]), "utf8") }
      json = jsonOf(data)
      if (fits(json)) return json as CapturedRequestData
    }
  }
  return "{\"_truncated\":true}" as CapturedRequestData
}
