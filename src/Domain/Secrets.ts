/**
 * Which keys name a secret, and the redaction of a value's secrets at any depth: the
 * audit record's `request_data` and error details, and the logger (which adds names of its own)
 * read the same list.
 */

/** docs/audit.md#what-is-recorded: values of keys matching these names are redacted. */
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
 * Whether a key *matches* a secret name (case-insensitive): some run of its words
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

/**
 * How a value is redacted: which keys are secret, what a string becomes, and how deep the value is
 * walked (`beyond` stands for what is nested deeper). The audit record and the logger differ only
 * in these.
 */
export interface Redaction {
  readonly isSecret: (key: string) => boolean
  readonly text: (text: string) => string
  readonly maxDepth: number
  readonly beyond: (value: unknown) => unknown
}

/** A deep copy of a value in which the value under every secret key is `[REDACTED]`. */
export const redactWith = (redaction: Redaction): (value: unknown) => unknown => {
  const walk = (value: unknown, depth: number): unknown => {
    if (depth > redaction.maxDepth) return redaction.beyond(value)
    if (typeof value === "string") return redaction.text(value)
    if (typeof value !== "object" || value === null) return value
    if (Array.isArray(value)) return value.map((v) => walk(v, depth + 1))
    const out: Record<string, unknown> = {}
    for (const [key, v] of Object.entries(value)) out[key] = redaction.isSecret(key) ? "[REDACTED]" : walk(v, depth + 1)
    return out
  }
  return (value) => walk(value, 0)
}

/** The audit record's redaction: the names above, strings as they are, `[TRUNCATED]` below 32 levels. */
export const redact = redactWith({ isSecret: isSecretKey, text: (text) => text, maxDepth: 32, beyond: () => "[TRUNCATED]" })
