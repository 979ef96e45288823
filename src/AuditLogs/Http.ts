import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { pageCount } from "../Domain/Pagination.ts"
import { AuditLogNotFound } from "../Errors.ts"
import { AuditRepo } from "./Repo.ts"

const meta = (page: number, perPage: number, total: number) => ({
  page,
  per_page: perPage,
  total,
  pages: pageCount(total, perPage),
  next_cursor: null,
  has_more: page * perPage < total
})

export const layer = HttpApiBuilder.group(
  Api,
  "auditLogs",
  Effect.fn(function*(handlers) {
    const repo = yield* AuditRepo
    return handlers
      .handle("list", ({ query: { page, per_page, start_date, end_date, ...filters } }) =>
        Effect.map(
          repo.page({ ...filters, from: start_date, to: end_date }, page, per_page),
          ({ items, total }) => ({ items, meta: meta(page, per_page, total) })
        ))
      .handle("byUser", ({ params, query: { page, per_page, start_date, end_date } }) =>
        Effect.map(
          repo.page({ user_id: params.user_id, from: start_date, to: end_date }, page, per_page),
          ({ items, total }) => ({ items, meta: meta(page, per_page, total) })
        ))
      .handle("get", ({ params }) =>
        Effect.flatMap(
          repo.findById(params.log_id),
          (row) => (row === undefined ? Effect.fail(AuditLogNotFound.instance) : Effect.succeed(row))
        ))
  })
)
