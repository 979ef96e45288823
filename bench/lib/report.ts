/** Summaries of rounds and the printed tables (bench/README.md#reading-the-table). */
import { percentile, type RoundResult } from "./load.ts"
import { addCounters, perRequest, type PerRequest, serviceCounterLines, type ServiceCounters } from "./metrics.ts"

/** CPU per answered request (µs) in one round: the server process, PostgreSQL, Redis (undefined: not measured or not used). */
export interface RoundCpu {
  readonly cpu_us_per_request: number | undefined
  /** Every process of the PostgreSQL cluster (bench/lib/cpu.ts). */
  readonly pg_us_per_request: number | undefined
  /** Only the backends connected to this server's database. */
  readonly pg_backends_us_per_request: number | undefined
  readonly redis_us_per_request: number | undefined
  /** Write system calls of the server process per answered request (/proc/<pid>/io). */
  readonly writes_per_request?: number | undefined
}

/** A round as the runner measured it: the load's result, the settle wait before it, CPU per request, the service's counters. */
export type MeasuredRound = RoundResult & RoundCpu & { readonly settle_ms: number; readonly counters?: ServiceCounters | undefined }

export interface RoundSummary {
  readonly rps: number
  readonly ok: number
  readonly errors: number
  readonly seconds: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly settle_ms: number
  readonly cpu_us_per_request: number | undefined
  readonly pg_us_per_request: number | undefined
  readonly pg_backends_us_per_request: number | undefined
  readonly redis_us_per_request: number | undefined
  readonly counters?: ServiceCounters | undefined
}

export interface ServerSummary {
  readonly status: "ok" | "failed"
  readonly reason?: string
  readonly rounds: ReadonlyArray<RoundSummary>
  readonly median_rps?: number
  readonly min_rps?: number
  readonly max_rps?: number
  /** Over all rounds' responses pooled. */
  readonly p50_ms?: number
  readonly p99_ms?: number
  readonly errors?: number
  readonly problems?: Record<string, number>
  readonly end_rss_mb?: number | undefined
  /** Medians over the rounds of CPU time per answered request (µs): the server process, PostgreSQL (cluster; this database's backends), Redis. */
  readonly cpu_us_per_request?: number | undefined
  readonly pg_us_per_request?: number | undefined
  readonly pg_backends_us_per_request?: number | undefined
  readonly redis_us_per_request?: number | undefined
  /** From the server's /metrics (the service only): its counters over all rounds, and per answered request. */
  readonly counters?: ServiceCounters | undefined
  readonly per_request?: PerRequest | undefined
}

export const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  if (s.length === 0) return NaN
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

export const summarize = (rounds: ReadonlyArray<MeasuredRound>, failure: string | undefined, endRss: number | undefined): ServerSummary => {
  const roundSummaries = rounds.map((r) => ({
    rps: round1(r.rps), ok: r.ok, errors: r.errors, seconds: round2(r.seconds), p50_ms: round2(r.p50), p99_ms: round2(r.p99), settle_ms: r.settle_ms,
    cpu_us_per_request: roundOrUndefined(r.cpu_us_per_request),
    pg_us_per_request: roundOrUndefined(r.pg_us_per_request),
    pg_backends_us_per_request: roundOrUndefined(r.pg_backends_us_per_request),
    redis_us_per_request: roundOrUndefined(r.redis_us_per_request),
    writes_per_request: r.writes_per_request === undefined ? undefined : Math.round(r.writes_per_request * 100) / 100,
    counters: r.counters
  }))
  const problems: Record<string, number> = {}
  for (const r of rounds) for (const [k, v] of Object.entries(r.problems)) problems[k] = (problems[k] ?? 0) + v
  const ok = rounds.reduce((n, r) => n + r.ok, 0)
  const errors = rounds.reduce((n, r) => n + r.errors, 0)
  const reason = failure ?? (rounds.length > 0 && ok === 0
    ? `every request failed (${Object.entries(problems).map(([k, v]) => `${k} ×${v}`).join(", ") || "no answers"})`
    : rounds.length === 0 ? "no rounds ran" : undefined)
  if (reason !== undefined) return { status: "failed", reason, rounds: roundSummaries, problems, end_rss_mb: endRss }
  const total = rounds.reduce((n, r) => n + r.latencies.length, 0)
  const pooled = new Float64Array(total)
  let offset = 0
  for (const r of rounds) {
    pooled.set(r.latencies, offset)
    offset += r.latencies.length
  }
  pooled.sort()
  const rps = rounds.map((r) => r.rps)
  // The rounds whose counters were read: the service's (a failed scrape leaves its round out); the baseline has none.
  const counted = rounds.filter((r) => r.counters !== undefined)
  const counters = addCounters(counted.map((r) => r.counters!))
  const per_request = counters === undefined ? undefined : perRequest(counters, counted.reduce((n, r) => n + r.ok + r.errors, 0))
  return {
    status: "ok",
    rounds: roundSummaries,
    median_rps: round1(median(rps)),
    min_rps: round1(Math.min(...rps)),
    max_rps: round1(Math.max(...rps)),
    p50_ms: round2(percentile(pooled, 50)),
    p99_ms: round2(percentile(pooled, 99)),
    errors,
    problems,
    end_rss_mb: endRss,
    cpu_us_per_request: medianOf(rounds, "cpu_us_per_request"),
    pg_us_per_request: medianOf(rounds, "pg_us_per_request"),
    pg_backends_us_per_request: medianOf(rounds, "pg_backends_us_per_request"),
    redis_us_per_request: medianOf(rounds, "redis_us_per_request"),
    counters,
    per_request
  }
}

const roundOrUndefined = (n: number | undefined) => (n === undefined ? undefined : Math.round(n))

const medianOf = (rounds: ReadonlyArray<MeasuredRound>, key: keyof RoundCpu) => {
  const measured = rounds.flatMap((r) => (r[key] === undefined ? [] : [r[key]]))
  return measured.length === 0 ? undefined : Math.round(median(measured))
}

type CpuKey = "cpu_us_per_request" | "pg_us_per_request" | "pg_backends_us_per_request" | "redis_us_per_request"

/** How many times the baseline's CPU per request the service spends there (1.0 = as cheap; lower is better). */
export const cpuRatio = (service: ServerSummary, baseline: ServerSummary, key: CpuKey = "cpu_us_per_request") => {
  const s = service[key]
  const b = baseline[key]
  return s !== undefined && b !== undefined && b > 0 ? s / b : undefined
}

export const round1 = (n: number) => Math.round(n * 10) / 10
export const round2 = (n: number) => Math.round(n * 100) / 100

const num = (n: number | undefined, digits = 0) =>
  n === undefined || Number.isNaN(n) ? "–" : n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })

export const ratio = (service: ServerSummary, baseline: ServerSummary) =>
  service.median_rps !== undefined && baseline.median_rps !== undefined && baseline.median_rps > 0 ? service.median_rps / baseline.median_rps : undefined

/** Where PostgreSQL's CPU is: its own processes (measured), or inside the server process (PGlite). */
export type DatabaseCpu = "postgres" | "in-server"

/**
 * A workload's block of the report. `writes`: the write operations it makes, whose batch sizes
 * are printed ("no batching" while the service has no `author_write_batch_size` histogram).
 */
export const formatWorkload = (
  id: string, title: string, detail: string, s: ServerSummary, b: ServerSummary, db: DatabaseCpu, redis: boolean, writes: ReadonlyArray<string> = []
) => {
  const lines = [`${id}  ${title}  [${detail}]`]
  const pgHead = db === "postgres" ? "PG (own db)" : "PG"
  lines.push(`  ${"".padEnd(9)} ${"".padEnd(28)} ${"".padStart(8)} ${"".padStart(8)} ${"".padStart(7)} ${"".padStart(7)}   CPU µs per request:`)
  lines.push(`  ${"server".padEnd(9)} ${"req/s median (min–max)".padEnd(28)} ${"p50 ms".padStart(8)} ${"p99 ms".padStart(8)} ${"errors".padStart(7)} ${"RSS MB".padStart(7)} ` +
    `${"server".padStart(8)} ${pgHead.padStart(15)} ${"Redis".padStart(6)}`)
  const pgCell = (r: ServerSummary) =>
    db === "in-server" ? "in server" : `${num(r.pg_us_per_request)} (${num(r.pg_backends_us_per_request)})`
  for (const [name, r] of [["service", s], ["baseline", b]] as const) {
    if (r.status === "failed") {
      lines.push(`  ${name.padEnd(9)} failed: ${r.reason}`)
      continue
    }
    const rps = `${num(r.median_rps)} (${num(r.min_rps)}–${num(r.max_rps)})`
    lines.push(`  ${name.padEnd(9)} ${rps.padEnd(28)} ${num(r.p50_ms, 2).padStart(8)} ${num(r.p99_ms, 2).padStart(8)} ${num(r.errors).padStart(7)} ${num(r.end_rss_mb).padStart(7)} ` +
      `${num(r.cpu_us_per_request).padStart(8)} ${pgCell(r).padStart(15)} ${(redis ? num(r.redis_us_per_request) : "–").padStart(6)}`)
    const problems = Object.entries(r.problems ?? {})
    if (problems.length > 0) lines.push(`  ${"".padEnd(9)} errors: ${problems.map(([k, v]) => `${k} ×${v}`).join(", ")}`)
  }
  const q = ratio(s, b)
  const times = (x: number | undefined) => (x === undefined ? "–" : `${x.toFixed(2)}×`)
  const parts = [`server ${times(cpuRatio(s, b))}`]
  if (db === "postgres") parts.push(`PostgreSQL ${times(cpuRatio(s, b, "pg_us_per_request"))} (own db ${times(cpuRatio(s, b, "pg_backends_us_per_request"))})`)
  if (redis) parts.push(`Redis ${times(cpuRatio(s, b, "redis_us_per_request"))}`)
  lines.push(`  service/baseline: req/s (medians) ${times(q)}; CPU per request ${parts.join(", ")}`)
  if (s.counters !== undefined && s.per_request !== undefined) lines.push(...serviceCounterLines(s.counters, s.per_request, writes))
  return lines.join("\n")
}

export { num as formatNumber }
