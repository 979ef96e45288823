/**
 * `request_data` of an audit record (docs/audit.md#what-is-recorded): `{query, body}`, secrets redacted at any
 * depth, at most 8 KiB of JSON.
 */
import { redact } from "../Domain/Secrets.ts"

export const REQUEST_DATA_MAX_BYTES = 8192

/**
 * `request_data` as captured: its JSON text (secrets redacted, at most 8 KiB), built once, when the
 * bound is enforced, and then carried as it is by the stream entry and the INSERT (StreamWriter.ts,
 * Storable.ts) and measured by the buffer's bound (Buffer.ts) without serializing it again.
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
