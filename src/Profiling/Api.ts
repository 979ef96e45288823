/**
 * Profiling endpoints (docs/operations.md#profiling): status, the list of reports, one
 * report as HTML, its deletion, and a report taken now (only while enabled, one
 * at a time). No authentication.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { Wire } from "../Errors.ts"

export const ProfilingStatus = Schema.Struct({
  enabled: Schema.Boolean,
  profiler_installed: Schema.Boolean,
  output_directory: Schema.String,
  interval_seconds: Schema.Int,
  /** docs/operations.md#profiling: kept for compatibility; holds the runtime version (`node v20.x`). */
  python_version: Schema.String,
  command: Schema.String
}).annotate({ identifier: "ProfilingStatus" })

export const ReportDescriptor = Schema.Struct({
  filename: Schema.String,
  path: Schema.String,
  size_bytes: Schema.Int,
  /** Unix epoch seconds. */
  created_at: Schema.Int
}).annotate({ identifier: "ReportDescriptor" })
export type ReportDescriptor = typeof ReportDescriptor.Type

export const ReportList = Schema.Struct({
  reports: Schema.Array(ReportDescriptor),
  total_count: Schema.Int
}).annotate({ identifier: "ReportList" })

export const CaptureRequest = Schema.Struct({
  seconds: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 60 })))
}).annotate({ identifier: "CaptureRequest" })

export const ReportDeleted = Schema.Struct({
  message: Schema.Literal("Report deleted"),
  filename: Schema.String
}).annotate({ identifier: "ReportDeleted" })

/**
 * A report name as the client sent it, any text: the profiler checks it (Profiler.ts `locate`) and
 * answers every name it refuses with 400 `Invalid filename` — NUL and bytes that are not UTF-8
 * (which Http/UrlText.ts marks as NUL) included, where other parameters give such text a 422.
 */
const ReportName = Schema.String.annotate({
  description: "A report name: `^[A-Za-z0-9][A-Za-z0-9._-]*\\.html$`, at most 255 bytes, resolving inside the output directory; " +
    "any other name is 400 `Invalid filename`"
})

const FilenameParams = { filename: ReportName }

export class ProfilingApi extends HttpApiGroup.make("profiling")
  .add(
    HttpApiEndpoint.get("status", "/api/profiling/status", { success: ProfilingStatus })
      .annotate(OpenApi.Summary, "Profiler status"),
    HttpApiEndpoint.get("listReports", "/api/profiling/reports", { success: ReportList })
      .annotate(OpenApi.Summary, "Profiling reports, newest first"),
    HttpApiEndpoint.post("captureReport", "/api/profiling/reports", {
      payload: CaptureRequest,
      success: ReportDescriptor.pipe(HttpApiSchema.status(201)),
      error: Wire.CaptureRefused
    })
      .annotate(OpenApi.Summary, "Profile the service now for `seconds` (1–60, default PROFILING_INTERVAL_SECONDS capped at 60)")
      .annotate(
        OpenApi.Description,
        "One capture samples at a time. A request waits for the interval capture that is sampling (at most `interval_seconds`), then samples. " +
          "409 `Profiling is disabled` when `PROFILING_ENABLED=false`; 409 `A capture is already running` while another on-demand capture runs or waits."
      ),
    HttpApiEndpoint.get("getReport", "/api/profiling/reports/:filename", {
      params: FilenameParams,
      success: Schema.String.pipe(HttpApiSchema.asText({ contentType: "text/html" })),
      error: [Wire.InvalidFilename, Wire.ReportNotFound]
    })
      .annotate(OpenApi.Summary, "One report: a self-contained HTML page"),
    HttpApiEndpoint.delete("deleteReport", "/api/profiling/reports/:filename", {
      params: FilenameParams,
      success: ReportDeleted,
      error: [Wire.InvalidFilename, Wire.ReportNotFound]
    })
      .annotate(OpenApi.Summary, "Delete a report")
  )
  .annotate(OpenApi.Title, "Profiling")
{}
