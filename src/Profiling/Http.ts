/** Handlers of the profiling group: thin adapters over the `Profiler` service. */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { Profiler } from "./Profiler.ts"

/** An on-demand capture lasts at most a minute (docs/operations.md#profiling). */
const MAX_SECONDS = 60

export const layer = HttpApiBuilder.group(
  Api,
  "profiling",
  Effect.fn(function*(handlers) {
    const profiler = yield* Profiler
    return handlers
      .handle("status", () => Effect.succeed(profiler.status))
      .handle("listReports", () => Effect.map(profiler.list, (reports) => ({ reports, total_count: reports.length })))
      .handle("captureReport", ({ payload }) =>
        profiler.capture(payload.seconds ?? Math.min(profiler.status.interval_seconds, MAX_SECONDS)))
      .handle("getReport", ({ params }) => profiler.read(params.filename))
      .handle("deleteReport", ({ params }) =>
        Effect.as(profiler.remove(params.filename), { message: "Report deleted" as const, filename: params.filename }))
  })
)
