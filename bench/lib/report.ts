/** Summaries of rounds and the printed tables (bench/README.md §Output). */
import { percentile, type RoundResult } from "./load.ts"

/** A round as the runner measured it: the load's result, the settle wait before it, the server's CPU per request. */
export type MeasuredRound = RoundResult & { readonly settle_ms: number; readonly cpu_us_per_request: number | undefined }

export interface RoundSummary {
  readonly rps: number
  readonly ok: number
  readonly errors: number
  readonly seconds: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly settle_ms: number
  readonly cpu_us_per_request: number | undefined
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
  /** Median over the rounds of the server's CPU time per answered request (µs). */
  readonly cpu_us_per_request?: number | undefined
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
    cpu_us_per_request: r.cpu_us_per_request === undefined ? undefined : Math.round(r.cpu_us_per_request)
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
    cpu_us_per_request: cpuPerRequest(rounds)
  }
}

const cpuPerRequest = (rounds: ReadonlyArray<MeasuredRound>) => {
  const measured = rounds.flatMap((r) => (r.cpu_us_per_request === undefined ? [] : [r.cpu_us_per_request]))
  return measured.length === 0 ? undefined : Math.round(median(measured))
}

/** How many times the baseline's CPU per request the service spends (1.0 = as cheap; lower is better). */
export const cpuRatio = (service: ServerSummary, baseline: ServerSummary) =>
  service.cpu_us_per_request !== undefined && baseline.cpu_us_per_request !== undefined && baseline.cpu_us_per_request > 0
    ? service.cpu_us_per_request / baseline.cpu_us_per_request
    : undefined

export const round1 = (n: number) => Math.round(n * 10) / 10
export const round2 = (n: number) => Math.round(n * 100) / 100

const num = (n: number | undefined, digits = 0) =>
  n === undefined || Number.isNaN(n) ? "–" : n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })

export const ratio = (service: ServerSummary, baseline: ServerSummary) =>
  service.median_rps !== undefined && baseline.median_rps !== undefined && baseline.median_rps > 0 ? service.median_rps / baseline.median_rps : undefined

export const formatWorkload = (id: string, title: string, detail: string, s: ServerSummary, b: ServerSummary) => {
  const lines = [`${id}  ${title}  [${detail}]`]
  lines.push(`  ${"server".padEnd(9)} ${"req/s median (min–max)".padEnd(28)} ${"p50 ms".padStart(8)} ${"p99 ms".padStart(8)} ${"errors".padStart(7)} ${"RSS MB".padStart(7)} ${"CPU µs/req".padStart(11)}`)
  for (const [name, r] of [["service", s], ["baseline", b]] as const) {
    if (r.status === "failed") {
      lines.push(`  ${name.padEnd(9)} failed: ${r.reason}`)
      continue
    }
    const rps = `${num(r.median_rps)} (${num(r.min_rps)}–${num(r.max_rps)})`
    lines.push(`  ${name.padEnd(9)} ${rps.padEnd(28)} ${num(r.p50_ms, 2).padStart(8)} ${num(r.p99_ms, 2).padStart(8)} ${num(r.errors).padStart(7)} ${num(r.end_rss_mb).padStart(7)} ${num(r.cpu_us_per_request).padStart(11)}`)
    const problems = Object.entries(r.problems ?? {})
    if (problems.length > 0) lines.push(`  ${"".padEnd(9)} errors: ${problems.map(([k, v]) => `${k} ×${v}`).join(", ")}`)
  }
  const q = ratio(s, b)
  const c = cpuRatio(s, b)
  lines.push(`  service/baseline (median req/s): ${q === undefined ? "–" : `${q.toFixed(2)}×`}; ` +
    `CPU per request: ${c === undefined ? "–" : `${c.toFixed(2)}× the baseline's`}`)
  return lines.join("\n")
}

export { num as formatNumber }
