import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
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

export const AuditLogsHttpLive = HttpApiBuilder.group(Api, "auditLogs", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* AuditRepo
    return handlers
      .handle("list", ({ urlParams: { page, per_page, start_date, end_date, ...filters } }) =>
        Effect.map(
          repo.page({ ...filters, from: start_date, to: end_date }, page, per_page),
          ({ items, total }) => ({ items, meta: meta(page, per_page, total) })
        ))
      .handle("byUser", ({ path, urlParams: { page, per_page, start_date, end_date } }) =>
        Effect.map(
          repo.page({ user_id: path.user_id, from: start_date, to: end_date }, page, per_page),
          ({ items, total }) => ({ items, meta: meta(page, per_page, total) })
        ))
      .handle("get", ({ path }) =>
        Effect.flatMap(repo.findById(path.log_id), (row) => (row === undefined ? Effect.fail(AuditLogNotFound.instance) : Effect.succeed(row))))
  }))
