/**
 * Pagination rules (docs/http-api.md#authors): page ≥ 1, per_page ≥ 1 (authors: clamped to 1000),
 * both 32-bit, `pages = ceil(total / per_page)`, and an opaque keyset cursor that costs the same at
 * any depth.
 */
import { Effect, Option, Schema, SchemaGetter, SchemaIssue, SchemaTransformation } from "effect"
import { issue } from "./Params.ts"

export const AUTHORS_MAX_PER_PAGE = 1000
/** `page` and `per_page` are 32-bit: above this a request is refused (422, WebSocket `status_code 2`), never clamped. */
export const INT32_MAX = 2_147_483_647
export const MAX_PAGE = INT32_MAX

export const pageCount = (total: number, perPage: number) => (total === 0 ? 0 : Math.ceil(total / perPage))

/**
 * The cursor is the last id seen, base64url-encoded: opaque to clients, cheap to check. `btoa` /
 * `atob` rather than Node's Buffer: the domain is part of the client kit, which runs in browsers.
 * The text is ASCII, so the binary strings they use are its UTF-8.
 */
export const encodeCursor = (lastId: number): string =>
  btoa(`a:${lastId}`).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")

/** base64url without padding, read as Buffer reads it: a last lone character carries no whole byte and is dropped. */
const fromBase64Url = (text: string): string => {
  const whole = (text.length % 4 === 1 ? text.slice(0, -1) : text).replace(/-/g, "+").replace(/_/g, "/")
  return atob(whole.padEnd(Math.ceil(whole.length / 4) * 4, "="))
}

export const decodeCursor = (cursor: string): Option.Option<number> => {
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(cursor)) return Option.none()
  const match = /^a:(\d{1,16})$/.exec(fromBase64Url(cursor))
  if (match === null) return Option.none()
  const id = Number(match[1])
  return Number.isSafeInteger(id) ? Option.some(id) : Option.none()
}

/** Pagination metadata (docs/http-api.md#authors). */
export const PageMeta = Schema.Struct({
  page: Schema.Int,
  per_page: Schema.Int,
  total: Schema.Int,
  pages: Schema.Int,
  next_cursor: Schema.NullOr(Schema.String),
  has_more: Schema.Boolean
})
export type PageMeta = typeof PageMeta.Type

/** The opaque keyset cursor from `meta.next_cursor`; decodes to the last id seen. */
export const Cursor = Schema.String.pipe(
  Schema.decodeTo(Schema.Int, {
    decode: SchemaGetter.transformEffect((text: string, options) =>
      Option.match(decodeCursor(text), {
        onNone: () => Effect.fail(new SchemaIssue.InvalidValue({ message: issue("value_error", "Invalid cursor") }, text, options)),
        onSome: (id) => Effect.succeed(id)
      })
    ),
    // Encodable, so a typed client (src/Client) can pass `meta.next_cursor` back as it came.
    encode: SchemaGetter.transform((id: number) => encodeCursor(id))
  })
)

/**
 * An author page's `per_page`, from a query string (HTTP) or a JSON number (WebSocket), checked
 * (1 to INT32_MAX): above AUTHORS_MAX_PER_PAGE it is clamped, not refused.
 */
export const clampPerPage = <From extends Schema.Top & { readonly Type: number }>(from: From) =>
  from.pipe(
    Schema.decodeTo(
      Schema.Int,
      SchemaTransformation.transform({ decode: (n: number) => Math.min(n, AUTHORS_MAX_PER_PAGE), encode: (n: number) => n })
    )
  )

/** A page as asked for: offset (`page`) or keyset (`cursor`, the last id seen). */
export interface PageQuery {
  readonly page: number
  readonly perPage: number
  readonly cursor: Option.Option<number>
}

export interface PageRequest {
  readonly page: number
  readonly perPage: number
  readonly afterId: Option.Option<number>
}
