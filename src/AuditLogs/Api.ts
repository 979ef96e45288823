/** The audit-log HTTP contract (docs/audit.md#reading-it, docs/audit.md#what-is-recorded). */
import { Effect, Schema, SchemaGetter, SchemaIssue } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Authentication, RequiredRoles } from "../Auth/Middleware.ts"
import { MAX_PAGE, PageMeta } from "../Domain/Pagination.ts"
import { OperationRoles } from "../Domain/User.ts"
import { Wire } from "../Errors.ts"
import { documentedAs, IntFromString, IntParam, issue, ParamText } from "../Domain/Params.ts"

export const AUDIT_MAX_PER_PAGE = 100

const OUTCOMES = ["success", "error", "permission_denied"] as const

const ISO_8601 = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|z|[+-]\d{2}:?\d{2})?)?$/

/**
 * An ISO 8601 date or datetime (a datetime without zone is UTC). `endOfDay` makes a bare date
 * mean the last millisecond of that day, so `end_date=2026-01-31` includes all of the 31st
 * (the range is inclusive: docs/audit.md#reading-it). Anything else, or an impossible date, is a 422.
 */
export const parseIsoDate = (text: string, endOfDay: boolean): Date | undefined => {
  const m = ISO_8601.exec(text.trim())
  if (m === null) return undefined
  const [, y, mo, d, h, mi, s, frac, zone] = m
  const year = Number(y), month = Number(mo), day = Number(d)
  const hour = Number(h ?? 0), minute = Number(mi ?? 0), second = Number(s ?? 0)
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return undefined
  const probe = new Date(Date.UTC(year, month - 1, day))
  if (probe.getUTCDate() !== day || probe.getUTCMonth() !== month - 1) return undefined
  const millis = frac === undefined ? 0 : Math.floor(Number(`0.${frac}`) * 1000)
  let time = Date.UTC(year, month - 1, day, hour, minute, second, millis)
  if (h === undefined && endOfDay) time += 86_400_000 - 1
  if (zone !== undefined && zone.toUpperCase() !== "Z") {
    const sign = zone.startsWith("-") ? -1 : 1
    const digits = zone.slice(1).replace(":", "")
    time -= sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60_000
  }
  const date = new Date(time)
  return Number.isNaN(date.getTime()) ? undefined : date
}

const DateParam = (endOfDay: boolean) =>
  Schema.String.pipe(
    Schema.decodeTo(Schema.Date, {
      decode: SchemaGetter.transformEffect((text: string, options) => {
        const date = parseIsoDate(text, endOfDay)
        return date === undefined
          ? Effect.fail(
            new SchemaIssue.InvalidValue(
              { message: issue("datetime_from_date_parsing", "Input should be a valid datetime or date (ISO 8601)") },
              text,
              options
            )
          )
          : Effect.succeed(date)
      }),
      encode: SchemaGetter.transform((date: Date) => date.toISOString())
    })
  ).annotate(documentedAs({
    type: "string",
    format: "date-time",
    description: "ISO 8601 datetime (one without zone is UTC) or date (`YYYY-MM-DD`), inclusive" +
      (endOfDay ? ": a date includes the whole day." : ": a date starts at midnight UTC.")
  }))

const Page = IntParam({ minimum: 1, maximum: MAX_PAGE }, { default: 1 }).pipe(Schema.withDecodingDefaultTypeKey(Effect.succeed(1)))
/** per_page 1 to 100 for audit logs, refused, not clamped (docs/audit.md#reading-it). */
const AuditPerPage = IntParam({ minimum: 1, maximum: AUDIT_MAX_PER_PAGE }, { default: 20 })
  .pipe(Schema.withDecodingDefaultTypeKey(Effect.succeed(20)))
const DateRange = {
  start_date: Schema.optional(DateParam(false)),
  end_date: Schema.optional(DateParam(true))
}

export const AuditListParams = Schema.Struct({
  page: Page,
  per_page: AuditPerPage,
  user_id: Schema.optional(ParamText),
  username: Schema.optional(ParamText),
  action_type: Schema.optional(ParamText),
  resource: Schema.optional(ParamText),
  outcome: Schema.optional(ParamText.annotate(documentedAs({ type: "string", enum: [...OUTCOMES] }))),
  ...DateRange
})

export const AuditUserParams = Schema.Struct({ page: Page, per_page: AuditPerPage, ...DateRange })

const Timestamp = Schema.String.annotate({ description: "ISO 8601 UTC datetime without zone", examples: ["2026-01-31T12:00:00.000000"] })

/** Items of the per-user list (docs/audit.md#what-is-recorded). */
export const AuditLogUserItem = Schema.Struct({
  id: Schema.Int,
  timestamp: Timestamp,
  user_id: Schema.String,
  username: Schema.String,
  action_type: Schema.String,
  resource: Schema.String,
  outcome: Schema.Literals(OUTCOMES),
  response_status: Schema.Int,
  duration_ms: Schema.Int
}).annotate({ identifier: "AuditLogUserItem" })

export const AuditLogListItem = Schema.Struct({
  ...AuditLogUserItem.fields,
  ip_address: Schema.String,
  request_id: Schema.String
}).annotate({ identifier: "AuditLogListItem" })

/** The detail adds the detail fields and `correlation_id` (docs/audit.md#what-is-recorded). */
export const AuditLogDetail = Schema.Struct({
  ...AuditLogListItem.fields,
  user_roles: Schema.Array(Schema.String),
  user_agent: Schema.String,
  request_data: Schema.Record(Schema.String, Schema.Unknown),
  error_message: Schema.NullOr(Schema.String),
  correlation_id: Schema.String
}).annotate({ identifier: "AuditLogDetail" })

export const AuditLogPage = Schema.Struct({ items: Schema.Array(AuditLogListItem), meta: PageMeta })
export const AuditLogUserPage = Schema.Struct({ items: Schema.Array(AuditLogUserItem), meta: PageMeta })

const requires = `Requires role: ${OperationRoles.readAuditLogs.map((r) => `\`${r}\``).join(", ")}.`

export class AuditLogsApi extends HttpApiGroup.make("auditLogs")
  .add(
    HttpApiEndpoint.get("list", "/audit-logs", { query: AuditListParams, success: AuditLogPage })
      .annotate(RequiredRoles, OperationRoles.readAuditLogs)
      .annotate(OpenApi.Summary, "List audit records")
      .annotate(OpenApi.Description, `Newest first. Filters are exact and combine with AND; \`start_date\`/\`end_date\` are inclusive ISO 8601 (a bare end date includes the whole day). \`per_page\` 1–100.\n\n${requires}`),
    HttpApiEndpoint.get("byUser", "/audit-logs/user/:user_id", {
      params: { user_id: ParamText },
      query: AuditUserParams,
      success: AuditLogUserPage
    })
      .annotate(RequiredRoles, OperationRoles.readAuditLogs)
      .annotate(OpenApi.Summary, "List one user's audit records")
      .annotate(OpenApi.Description, `Newest first; \`user_id\` is the identity provider's user id.\n\n${requires}`),
    HttpApiEndpoint.get("get", "/audit-logs/:log_id", {
      params: { log_id: IntFromString.annotate(documentedAs({ type: "integer", minimum: 1 })) },
      success: AuditLogDetail,
      error: Wire.AuditLogNotFound
    })
      .annotate(RequiredRoles, OperationRoles.readAuditLogs)
      .annotate(OpenApi.Summary, "One audit record")
      .annotate(OpenApi.Description, `All fields, with \`request_data\` (secrets redacted) and \`correlation_id\`.\n\n${requires}`)
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Audit logs")
{}
