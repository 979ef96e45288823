/**
 * Profiling endpoints (INTERFACE §Endpoints, CONTRACT §7, §9): status, the list of reports, one
 * report as HTML, its deletion, and (beyond INTERFACE) a report taken now. No authentication.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Wire } from "../Errors.ts"
import { ParamText } from "../Http/Params.ts"

export const ProfilingStatus = Schema.Struct({
  enabled: Schema.Boolean,
  profiler_installed: Schema.Boolean,
  output_directory: Schema.String,
  interval_seconds: Schema.Int,
  /** CONTRACT §7: kept for compatibility; holds the runtime version (`node v20.x`). */
  python_version: Schema.String,
  command: Schema.String
}).annotations({ identifier: "ProfilingStatus" })

export const ReportDescriptor = Schema.Struct({
  filename: Schema.String,
  path: Schema.String,
  size_bytes: Schema.Int,
  /** Unix epoch seconds. */
  created_at: Schema.Int
}).annotations({ identifier: "ReportDescriptor" })
export type ReportDescriptor = typeof ReportDescriptor.Type

export const ReportList = Schema.Struct({
  reports: Schema.Array(ReportDescriptor),
  total_count: Schema.Int
}).annotations({ identifier: "ReportList" })

export const CaptureRequest = Schema.Struct({
  seconds: Schema.optional(Schema.Int.pipe(Schema.between(1, 60)))
}).annotations({ identifier: "CaptureRequest" })

export const ReportDeleted = Schema.Struct({
  message: Schema.Literal("Report deleted"),
  filename: Schema.String
}).annotations({ identifier: "ReportDeleted" })

const filename = HttpApiSchema.param("filename", ParamText)

export class ProfilingApi extends HttpApiGroup.make("profiling")
  .add(
    HttpApiEndpoint.get("status", "/api/profiling/status")
      .addSuccess(ProfilingStatus)
      .annotate(OpenApi.Summary, "Profiler status")
  )
  .add(
    HttpApiEndpoint.get("listReports", "/api/profiling/reports")
      .addSuccess(ReportList)
      .annotate(OpenApi.Summary, "Profiling reports, newest first")
  )
  .add(
    HttpApiEndpoint.post("captureReport", "/api/profiling/reports")
      .setPayload(CaptureRequest)
      .addSuccess(ReportDescriptor, { status: 201 })
      .annotate(OpenApi.Summary, "Profile the service now for `seconds` (1–60, default PROFILING_INTERVAL_SECONDS capped at 60)")
  )
  .add(
    HttpApiEndpoint.get("getReport")`/api/profiling/reports/${filename}`
      .addSuccess(HttpApiSchema.Text({ contentType: "text/html" }))
      .addError(Wire.InvalidFilename)
      .addError(Wire.ReportNotFound)
      .annotate(OpenApi.Summary, "One report: a self-contained HTML page")
  )
  .add(
    HttpApiEndpoint.del("deleteReport")`/api/profiling/reports/${filename}`
      .addSuccess(ReportDeleted)
      .addError(Wire.InvalidFilename)
      .addError(Wire.ReportNotFound)
      .annotate(OpenApi.Summary, "Delete a report")
  )
  .annotate(OpenApi.Title, "Profiling")
{}
