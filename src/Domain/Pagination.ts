/**
 * Pagination rules (CONTRACT §3, §9): page ≥ 1, per_page ≥ 1 (authors: clamped to 1000),
 * `pages = ceil(total / per_page)`, and an opaque keyset cursor that costs the same at any depth.
 */
import { Option } from "effect"

export const AUTHORS_MAX_PER_PAGE = 1000
export const MAX_PAGE = 2_147_483_647

export const pageCount = (total: number, perPage: number) => (total === 0 ? 0 : Math.ceil(total / perPage))

/** The cursor is the last id seen, base64url-encoded: opaque to clients, cheap to check. */
export const encodeCursor = (lastId: number): string => Buffer.from(`a:${lastId}`, "utf8").toString("base64url")

export const decodeCursor = (cursor: string): Option.Option<number> => {
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(cursor)) return Option.none()
  const match = /^a:(\d{1,16})$/.exec(Buffer.from(cursor, "base64url").toString("utf8"))
  if (match === null) return Option.none()
  const id = Number(match[1])
  return Number.isSafeInteger(id) ? Option.some(id) : Option.none()
}

export interface PageRequest {
  readonly page: number
  readonly perPage: number
  readonly afterId: Option.Option<number>
}
