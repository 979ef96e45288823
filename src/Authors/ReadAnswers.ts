/**
 * Author reads as the text they are sent as, built once per database read: the JSON body of the
 * HTTP answer, its strong ETag (a hash of the body, so the same body has the same ETag on every
 * instance), and where in the body WebSocket packages 1 and 2 find their `data` and `meta`. This
 * is what the read cache keeps (ReadCache.ts): a hit writes the stored text, nothing is encoded
 * again, and `answered` is the HTTP answer of one — the handlers' and the front door's early-answer
 * stage's alike (Http.ts). Keys name a read exactly (every parameter that shapes its answer). Each
 * answer knows when the read it came from began (`readAt`): no answer older than
 * READ_CACHE_MAX_AGE_SECONDS is served.
 */
import { HttpServerResponse } from "effect/http"
import { hash } from "node:crypto"
import { type AuthorFilters, type AuthorPage, type AuthorRow, authorRowsJson } from "../Domain/Author.ts"
import { type PageMeta, pageCount, type PageQuery } from "../Domain/Pagination.ts"

export class ReadAnswer {
  /** The HTTP body (for a missing author: empty, and `found` is false). */
  readonly body: string
  /** Strong: `"` + a hash of the body + `"`. */
  readonly etag: string
  /** `body.slice(dataStart, dataEnd)` is the rows' JSON array (WebSocket `data`). */
  readonly dataStart: number
  readonly dataEnd: number
  /** Pages only: WebSocket package 2's `meta` (protobuf needs the object). */
  readonly meta: PageMeta | null
  readonly found: boolean
  /** When the database read it came from began (the read cache's clock, ms); the older part's for a page made of two. */
  readonly readAt: number
  constructor(body: string, dataStart: number, dataEnd: number, meta: PageMeta | null, found: boolean, readAt: number) {
    this.body = body
    this.etag = `"${hash("sha256", body, "base64url").slice(0, 27)}"`
    this.dataStart = dataStart
    this.dataEnd = dataEnd
    this.meta = meta
    this.found = found
    this.readAt = readAt
  }

  /** The rows as a JSON array. */
  get dataJson(): string {
    return this.dataStart === 0 && this.dataEnd === this.body.length ? this.body : this.body.slice(this.dataStart, this.dataEnd)
  }

  /** Pages only: `meta` as JSON (the body's tail). */
  get metaJson(): string {
    return this.body.slice(this.dataEnd + META_LABEL.length, this.body.length - 1)
  }
}

/**
 * Whether an `If-None-Match` value names `etag` (weak comparison: `W/` is ignored). `*` matches any
 * current representation, unless `star` is false (a check made before there is one).
 */
export const ifNoneMatch = (header: string | undefined, etag: string, star = true): boolean => {
  if (header === undefined) return false
  const opaque = etag.startsWith("W/") ? etag.slice(2) : etag
  for (const part of header.split(",")) {
    const candidate = part.trim()
    if ((star && candidate === "*") || candidate === opaque || (candidate.startsWith("W/") && candidate.slice(2) === opaque)) return true
  }
  return false
}

const JSON_TYPE = "application/json"

export const notModified = (etag: string) => HttpServerResponse.empty({ status: 304, headers: { etag } })

/** A read's HTTP answer: the stored text with its ETag, or 304 when `If-None-Match` names it. */
export const answered = (answer: ReadAnswer, ifNone: string | undefined) =>
  ifNoneMatch(ifNone, answer.etag)
    ? notModified(answer.etag)
    : HttpServerResponse.text(answer.body, { contentType: JSON_TYPE, headers: { etag: answer.etag } })

const ITEMS_LABEL = `{"items":`
const META_LABEL = `,"meta":`

/** `GET /authors` (one batch) and package 1: the rows, byte for byte `Schema.Array(Author)`. */
export const listAnswer = (rows: ReadonlyArray<AuthorRow>, readAt: number): ReadAnswer => {
  const body = `[${authorRowsJson(rows)}]`
  return new ReadAnswer(body, 0, body.length, null, true, readAt)
}

/** `GET /authors/paginated` and package 2: `{"items":[…],"meta":{…}}` (keys in `AuthorPage`'s order). */
export const pageAnswer = (page: AuthorPage, readAt: number): ReadAnswer =>
  pageOfRows(`[${authorRowsJson(page.items)}]`, page.meta, readAt)

const pageOfRows = (rows: string, meta: PageMeta, readAt: number): ReadAnswer => {
  const body = `${ITEMS_LABEL}${rows}${META_LABEL}${JSON.stringify(meta)}}`
  return new ReadAnswer(body, ITEMS_LABEL.length, ITEMS_LABEL.length + rows.length, meta, true, readAt)
}

/**
 * A page answer with another total of the list (`totalAnswer`): the same rows, `next_cursor` and
 * `has_more`; its meta's `total` and `pages` from the total. Byte for byte `pageAnswer` of the same
 * page read then; as old as the older of the two.
 */
export const withTotal = (answer: ReadAnswer, totalRead: ReadAnswer): ReadAnswer => {
  const meta = answer.meta!
  const total = Number(totalRead.body)
  return pageOfRows(answer.dataJson, { ...meta, total, pages: pageCount(total, meta.per_page) }, Math.min(answer.readAt, totalRead.readAt))
}

/** The list's total as kept on its own (its JSON: the number). */
export const totalAnswer = (total: number, readAt: number): ReadAnswer => {
  const body = String(total)
  return new ReadAnswer(body, 0, body.length, null, true, readAt)
}

/** `GET /authors/{author_id}`: the author, or that there is none (kept too: a 404 is a read). */
export const authorAnswer = (row: AuthorRow | undefined, readAt: number): ReadAnswer =>
  row === undefined
    ? new ReadAnswer("", 0, 0, null, false, readAt)
    : ((body) => new ReadAnswer(body, 0, body.length, null, true, readAt))(JSON.stringify({ id: row.id, name: row.name, created_at: row.created_at }))

// Keys: fields joined by NUL, which no parameter can hold (Domain/Params.ts `ParamText`); an
// absent value is `-`, a present one `=` + the value, so `name=` and no name differ.
const field = (value: string | number | undefined) => (value === undefined ? "-" : `=${value}`)
const filterFields = (f: AuthorFilters) => `${field(f.id)}\u0000${field(f.name)}\u0000${field(f.search)}`

export const listKey = (filters: AuthorFilters) => `L\u0000${filterFields(filters)}`

const pageFields = (query: PageQuery) => `${query.page}\u0000${query.perPage}\u0000${query.cursor._tag === "Some" ? `=${query.cursor.value}` : "-"}`

export const pageKey = (filters: AuthorFilters, query: PageQuery) => `P\u0000${pageFields(query)}\u0000${filterFields(filters)}`

/** An unfiltered page kept for its rows alone (Authors.ts `readPage`). */
export const pageRowsKey = (query: PageQuery) => `R\u0000${pageFields(query)}`

/** The unfiltered list's total, kept alone. */
export const TOTAL_KEY = "T"

export const authorKey = (id: number) => `A\u0000${id}`

/** Bytes the answer's text holds in memory: V8 keeps a string in one byte per character unless one needs two. */
export const textBytes = (text: string): number => (/[\u0100-\uffff]/.test(text) ? text.length * 2 : text.length)
