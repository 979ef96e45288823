import { Schema, SchemaTransformation } from "effect"
import { PageMeta } from "./Pagination.ts"
import { issue } from "./Params.ts"

/**
 * docs/http-api.md#authors: `{id, name, created_at}` in every response; created_at ISO 8601 UTC without zone.
 * A plain struct, not a `Schema.Class`: encoding a row into a class schema would validate it,
 * build an instance and validate that again — per author, on every page and list.
 */
export const Author = Schema.Struct({
  id: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  name: Schema.String,
  created_at: Schema.String.annotate({ description: "ISO 8601 UTC datetime without zone", examples: ["2026-01-31T12:00:00.000000"] })
}).annotate({ identifier: "Author" })

/** What an author read is filtered by (HTTP query parameters, WebSocket package filters). */
export interface AuthorFilters {
  readonly id?: number | undefined
  /** Exact name. */
  readonly name?: string | undefined
  /** Case-insensitive substring. */
  readonly search?: string | undefined
}

/** Whether a read is filtered at all (else it reads the whole list). */
export const isFiltered = (f: AuthorFilters) => f.id !== undefined || f.name !== undefined || f.search !== undefined

export interface AuthorRow {
  readonly id: number
  readonly name: string
  readonly created_at: string
}

/**
 * Rows as the members of a JSON array, byte for byte what encoding `Schema.Array(Author)` gives
 * (keys in the schema's order), without the brackets: the unpaginated list is written batch by
 * batch (GET /authors, WebSocket package 1), never held whole.
 */
export const authorRowsJson = (rows: ReadonlyArray<AuthorRow>): string =>
  rows.map((row) => JSON.stringify({ id: row.id, name: row.name, created_at: row.created_at })).join(",")

/**
 * docs/http-api.md#authors: names are trimmed, then 1–255 Unicode code points; stored as given.
 * NUL cannot be stored in PostgreSQL text, so it is refused here rather than failing in SQL.
 */
export const AuthorName = Schema.String.annotate({
  message: issue("string_type", "Input should be a valid string"),
  // What a client sends (OpenAPI documents the encoded side): the component is named here.
  identifier: "AuthorName",
  description: "1–255 characters after trimming"
}).pipe(
  Schema.decodeTo(Schema.String, SchemaTransformation.trim()),
  (self) => self.check(Schema.makeFilter<string>((s) => {
    const length = [...s].length
    if (length < 1) return issue("string_too_short", "String should have at least 1 character")
    if (length > 255) return issue("string_too_long", "String should have at most 255 characters")
    if (s.includes("\u0000")) return issue("string_pattern_mismatch", "String must not contain NUL characters")
    return true
  }, {
    expected: "1–255 characters after trimming, without NUL",
    toJsonSchema: () => ({ minLength: 1, maxLength: 255 })
  }))
)

export const AuthorPayload = Schema.Struct({ name: AuthorName })

export const AuthorPage = Schema.Struct({ items: Schema.Array(Author), meta: PageMeta })
export type AuthorPage = typeof AuthorPage.Type

export type AuthorEvent = {
  readonly event: "author.created" | "author.updated" | "author.deleted"
  readonly author: AuthorRow
}
