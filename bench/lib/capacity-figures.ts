/**
 * What the capacity model (bench/lib/capacity.ts, docs/scaling.md) reads of a bench result file
 * (bench/README.md#reading-the-table): the service's CPU per request of its process, PostgreSQL
 * and Redis, its counters per request and its write batches, for W1, W9, W2, W10 (and W6 for a
 * check). `trimResult` keeps only those fields, which is what `--write` commits beside the page.
 * No imports: the unit suite loads it on its own.
 */

/** CPU µs per answered request. */
export interface Cpu {
  readonly server: number
  readonly pg: number
  readonly redis: number
}

export interface WorkloadFigures extends Cpu {
  readonly id: string
  readonly rps: number
  /** Per answered request, from the service's /metrics. */
  readonly hits: number
  readonly misses: number
  readonly statements: number
  readonly selects: number
  /** Write statements (`count`) and the requests they carried (`sum`) by operation; undefined when the service had no batch metric. */
  readonly batches: Readonly<Record<string, { readonly count: number; readonly sum: number }>> | undefined
}

export interface Figures {
  readonly source: string
  readonly startedAt: string
  readonly options: string
  readonly machine: string
  readonly pgFigure: PgFigure
  readonly workloads: ReadonlyMap<string, WorkloadFigures>
}

/** Which PostgreSQL figure: every process of the cluster (WAL writer, checkpointer included), or only the bench database's backends. */
export type PgFigure = "cluster" | "own"

/** The workloads the model reads (W6 only for a check) and the bench command that measures them. */
export const NEEDED = ["W1", "W9", "W2", "W10"] as const
export const BENCH_COMMAND = "npm run bench -- --only W1,W2,W6,W9,W10 --audit-rows 20000"

type Json = Record<string, unknown>
const isObject = (x: unknown): x is Json => typeof x === "object" && x !== null && !Array.isArray(x)
const num = (x: unknown) => (typeof x === "number" && Number.isFinite(x) ? x : undefined)

/** The fields of a bench result the model reads, nothing else (what `--write` keeps beside the page). */
export const trimResult = (result: unknown, source: string): Json => {
  if (!isObject(result) || !Array.isArray(result["workloads"])) throw new Error(`${source}: not a bench result file (no workloads)`)
  const o = isObject(result["options"]) ? result["options"] : {}
  return {
    // A trimmed copy names the result file it came from.
    source: typeof result["source"] === "string" ? result["source"] : source,
    started_at: result["started_at"],
    options: { authors: o["authors"], rounds: o["rounds"], duration: o["duration"], auditRows: o["auditRows"], only: o["only"] },
    backends: result["backends"],
    machine: result["machine"],
    workloads: result["workloads"].filter(isObject).filter((w) => [...NEEDED, "W6"].includes(String(w["id"]))).map((w) => {
      const s = isObject(w["service"]) ? w["service"] : {}
      const counters = isObject(s["counters"]) ? s["counters"] : {}
      return {
        id: w["id"],
        service: {
          status: s["status"], median_rps: s["median_rps"], cpu_us_per_request: s["cpu_us_per_request"], pg_us_per_request: s["pg_us_per_request"],
          pg_backends_us_per_request: s["pg_backends_us_per_request"], redis_us_per_request: s["redis_us_per_request"], per_request: s["per_request"],
          counters: { batch_metric: counters["batch_metric"], batches: counters["batches"] }
        }
      }
    })
  }
}

/** Reads a bench result (or its trimmed copy) into the figures the model uses; names what is missing. */
export const readFigures = (result: unknown, file: string, pgFigure: PgFigure = "cluster"): Figures => {
  const t = trimResult(result, file)
  const source = String(t["source"])
  const backends = isObject(t["backends"]) ? t["backends"] : {}
  if (backends["database"] !== "postgres" || backends["redis"] !== "redis") {
    throw new Error(`${source}: measured on ${String(backends["database"])} + ${String(backends["redis"])}; the model needs PostgreSQL + Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL)`)
  }
  const workloads = new Map<string, WorkloadFigures>()
  for (const w of t["workloads"] as Array<Json>) {
    const id = String(w["id"])
    const s = w["service"] as Json
    const per = isObject(s["per_request"]) ? s["per_request"] : {}
    const counters = s["counters"] as Json
    const server = num(s["cpu_us_per_request"])
    const pg = num(s[pgFigure === "cluster" ? "pg_us_per_request" : "pg_backends_us_per_request"])
    const redis = num(s["redis_us_per_request"])
    const [hits, misses, statements, selects] = (["cache_hits", "cache_misses", "statements", "selects"] as const).map((k) => num(per[k]))
    if (s["status"] !== "ok" || server === undefined || pg === undefined || redis === undefined || hits === undefined || misses === undefined ||
      statements === undefined || selects === undefined) {
      if ((NEEDED as ReadonlyArray<string>).includes(id)) throw new Error(`${source}: ${id} has no complete service figures (status ${String(s["status"])}; CPU of the server, PostgreSQL and Redis, and the service's counters are needed)`)
      continue
    }
    let batches: Record<string, { count: number; sum: number }> | undefined
    if (counters["batch_metric"] === true) {
      batches = {}
      for (const [op, b] of Object.entries(isObject(counters["batches"]) ? counters["batches"] : {})) {
        const count = isObject(b) ? num(b["count"]) : undefined
        const sum = isObject(b) ? num(b["sum"]) : undefined
        if (count !== undefined && sum !== undefined && count > 0) batches[op] = { count, sum }
      }
    }
    workloads.set(id, { id, rps: num(s["median_rps"]) ?? 0, server, pg, redis, hits, misses, statements, selects, batches })
  }
  const missing = NEEDED.filter((id) => !workloads.has(id))
  if (missing.length > 0) throw new Error(`${source}: no ${missing.join(", ")}; run \`${BENCH_COMMAND}\` on PostgreSQL + Redis`)
  const o = t["options"] as Json
  const m = isObject(t["machine"]) ? t["machine"] : {}
  return {
    source,
    startedAt: String(t["started_at"] ?? "?"),
    options: `${Number(o["authors"] ?? 0).toLocaleString("en-US")} authors, ${String(o["rounds"])} rounds of ${String(o["duration"])} s`,
    machine: `${String(m["cores"])} cores (${String(m["cpu"])}), node ${String(m["node"])}`,
    pgFigure,
    workloads
  }
}
