/**
 * The service profiles its own CPU with the V8 inspector (`node:inspector`, Profiler domain;
 * docs/operations.md#profiling): when `PROFILING_ENABLED`, one report per `PROFILING_INTERVAL_SECONDS`, the newest
 * 20 kept; on demand (`POST`) only while enabled. One capture samples at a time: an on-demand one
 * waits for the interval capture that is sampling (at most one interval) and is refused with 409
 * while another on-demand one runs or waits. Reports are self-contained HTML files in
 * `PROFILING_OUTPUT_DIR`. Names from clients are checked strictly: the pattern and length, then the
 * real path (symlinks followed) must lie inside the directory.
 */
import { Context, Effect, Layer, Option, Schedule, Semaphore } from "effect"
import type { Stats } from "node:fs"
import { lstat, mkdir, readdir, readFile, realpath, stat, unlink, writeFile } from "node:fs/promises"
import { Session } from "node:inspector/promises"
import { join, resolve, sep } from "node:path"
import { AppConfig } from "../Config.ts"
import { CaptureRefused, InvalidFilename, ReportNotFound } from "../Errors.ts"
import { profilingCapturesRefusedTotal, type profilingRefusals } from "../Observability/Metrics.ts"
import type { ReportDescriptor } from "./Api.ts"
import { type CpuProfile, renderReport } from "./Report.ts"

export const REPORT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*\.html$/
export const KEEP_REPORTS = 20
/** A longer name cannot exist in the directory (NAME_MAX, in bytes; the pattern allows ASCII only). */
const NAME_MAX = 255
const SAMPLING_INTERVAL_MICROS = 1000
export const PROFILER_COMMAND = "node:inspector Profiler, 1 ms sampling"

const isMissing = (error: unknown) =>
  typeof error === "object" && error !== null && "code" in error && (error.code === "ENOENT" || error.code === "ENOTDIR")

/** Samples this process for `seconds` (each capture has its own inspector session). */
const sample = (seconds: number) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const session = new Session()
      session.connect()
      return session
    }),
    (session) =>
      Effect.gen(function*() {
        yield* Effect.promise(() => session.post("Profiler.enable"))
        yield* Effect.promise(() => session.post("Profiler.setSamplingInterval", { interval: SAMPLING_INTERVAL_MICROS }))
        yield* Effect.promise(() => session.post("Profiler.start"))
        yield* Effect.sleep(`${seconds} seconds`)
        const { profile } = yield* Effect.promise(() => session.post("Profiler.stop"))
        return profile as CpuProfile
      }),
    (session) => Effect.sync(() => session.disconnect())
  )

const timestampName = (date: Date) =>
  `profile-${date.toISOString().replace(/[-:]/g, "").replace(".", "")}-${Math.random().toString(36).slice(2, 6)}.html`

const make = Effect.gen(function*() {
  const config = yield* AppConfig
  const directory = resolve(config.profilingOutputDir)
  yield* Effect.promise(() => mkdir(directory, { recursive: true }))
  const realDirectory = yield* Effect.promise(() => realpath(directory))

  const describe = (filename: string, info: Stats): ReportDescriptor => ({
    filename,
    path: join(directory, filename),
    size_bytes: info.size,
    created_at: Math.floor(info.mtimeMs / 1000)
  })

  /** The checked real path of a report, or the client's error (docs/operations.md#profiling). */
  const locate = (filename: string): Effect.Effect<string, InvalidFilename | ReportNotFound> =>
    Effect.gen(function*() {
      if (filename.length > NAME_MAX || !REPORT_NAME.test(filename)) return yield* Effect.fail(InvalidFilename.instance)
      const candidate = join(directory, filename)
      const real = yield* Effect.tryPromise({ try: () => realpath(candidate), catch: (e) => e }).pipe(
        Effect.catch((error) =>
          isMissing(error)
            // A link whose target is gone cannot be shown to resolve inside: refuse it.
            ? Effect.tryPromise(() => lstat(candidate)).pipe(
              Effect.matchEffect({
                onFailure: () => Effect.fail(ReportNotFound.of(filename)),
                onSuccess: () => Effect.fail(InvalidFilename.instance)
              })
            )
            : Effect.die(error)
        )
      )
      if (!real.startsWith(realDirectory + sep)) return yield* Effect.fail(InvalidFilename.instance)
      const info = yield* Effect.promise(() => stat(real))
      if (!info.isFile()) return yield* Effect.fail(ReportNotFound.of(filename))
      return real
    })

  /** Reports in the directory, newest first (names that fail the checks are left out). */
  const list = Effect.gen(function*() {
    const names = (yield* Effect.promise(() => readdir(directory))).filter((n) => REPORT_NAME.test(n))
    const found = yield* Effect.forEach(names, (name) =>
      locate(name).pipe(
        Effect.flatMap((real) => Effect.promise(() => stat(real))),
        Effect.map((info) => [describe(name, info)]),
        Effect.orElseSucceed(() => [])
      ), { concurrency: 8 })
    return found.flat().sort((a, b) => b.created_at - a.created_at || b.filename.localeCompare(a.filename))
  })

  const read = (filename: string) =>
    Effect.flatMap(locate(filename), (real) => Effect.promise(() => readFile(real, "utf8")))

  /** Deletes the entry in the directory (a link, not its target). */
  const remove = (filename: string) =>
    Effect.andThen(locate(filename), Effect.promise(() => unlink(join(directory, filename))))

  const prune = Effect.gen(function*() {
    const reports = yield* list
    yield* Effect.forEach(reports.slice(KEEP_REPORTS), (r) =>
      Effect.promise(() => unlink(join(directory, r.filename)).catch(() => undefined)), { discard: true })
  })

  const capture = (seconds: number) =>
    Effect.gen(function*() {
      const startedAt = new Date()
      const profile = yield* sample(seconds)
      const filename = timestampName(startedAt)
      const html = renderReport(profile, { title: `CPU profile ${startedAt.toISOString()}`, startedAt, command: PROFILER_COMMAND })
      const path = join(directory, filename)
      yield* Effect.promise(() => writeFile(path, html, "utf8"))
      yield* prune
      return describe(filename, yield* Effect.promise(() => stat(path)))
    }).pipe(Effect.withSpan("Profiler.capture", { attributes: { seconds } }))

  // One capture samples at a time (docs/operations.md#profiling). The endpoint is public: an on-demand
  // capture waits (FIFO) for the interval capture that is sampling, and a second on-demand one
  // while the first runs or waits is refused, so nothing queues without bound.
  const sampling = yield* Semaphore.make(1)
  const onDemand = yield* Semaphore.make(1)
  const refuse = (reason: typeof profilingRefusals[number]) =>
    Effect.suspend(() => {
      profilingCapturesRefusedTotal.inc({ reason })
      return Effect.fail(CaptureRefused[reason])
    })
  const captureNow = (seconds: number) =>
    config.profilingEnabled
      ? onDemand.withPermitsIfAvailable(1)(sampling.withPermit(capture(seconds))).pipe(
        Effect.flatMap(Option.match({ onNone: () => refuse("running"), onSome: Effect.succeed }))
      )
      : refuse("disabled")

  const status = {
    enabled: config.profilingEnabled,
    profiler_installed: true,
    output_directory: directory,
    interval_seconds: config.profilingIntervalSeconds,
    python_version: `node ${process.version}`,
    command: PROFILER_COMMAND
  }

  if (config.profilingEnabled) {
    // Continuous profiling: back to back, one report per interval; a failure is logged, never fatal.
    yield* sampling.withPermit(capture(config.profilingIntervalSeconds)).pipe(
      Effect.catchCause((cause) => Effect.logWarning("Profiling capture failed", cause)),
      Effect.repeat(Schedule.forever),
      Effect.forkScoped
    )
  }

  return { status, list, read, remove, capture: captureNow, directory } as const
})

export class Profiler extends Context.Service<Profiler, Effect.Success<typeof make>>()("Profiling/Profiler") {
  /** The continuous capture fiber is scoped to the layer (`Layer.effect` provides the Scope). */
  static readonly layer = Layer.effect(Profiler, make)
}
