/**
 * What the service's own `/metrics` says about a round (bench/README.md#reading-the-table): scraped
 * before and after each of its rounds, the differences give per request its read cache's hits and
 * misses and the statements it sent to the database (`db_query_duration_seconds_count`, every
 * statement whoever sends it), and the sizes of its write batches (`author_write_batch_size`, a
 * histogram by `operation`, when the service has one). The baseline has no `/metrics`.
 * No imports beyond node: the unit suite loads it on its own.
 */

export interface MetricSample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** One scrape: its samples, and the metric names it declares (`# TYPE`), observed or not. */
export interface Scrape {
  readonly samples: ReadonlyArray<MetricSample>
  readonly declared: ReadonlySet<string>
}

const LINE = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/
const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g

/** Prometheus' text format, as prom-client writes it. */
export const parseMetrics = (text: string): Scrape => {
  const samples: Array<MetricSample> = []
  const declared = new Set<string>()
  for (const line of text.split("\n")) {
    if (line.startsWith("# TYPE ")) {
      const name = line.slice(7).split(" ")[0]
      if (name !== undefined && name !== "") declared.add(name)
      continue
    }
    if (line.startsWith("#")) continue
    const m = LINE.exec(line)
    if (m === null) continue
    const labels: Record<string, string> = {}
    for (const l of (m[2] ?? "").matchAll(LABEL)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_all, c: string) => (c === "n" ? "\n" : c))
    const value = m[3] === "+Inf" ? Infinity : m[3] === "-Inf" ? -Infinity : Number(m[3])
    samples.push({ name: m[1]!, labels, value })
  }
  return { samples, declared }
}

/** The service's metrics, or undefined when it has none to give (the baseline: 404). */
export const scrapeMetrics = async (baseUrl: string): Promise<Scrape | undefined> => {
  try {
    const res = await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })
    return res.status === 200 ? parseMetrics(await res.text()) : undefined
  } catch {
    return undefined
  }
}

const total = (s: Scrape, name: string, where: Readonly<Record<string, string>> = {}) =>
  s.samples.reduce((n, x) => (x.name === name && Object.entries(where).every(([k, v]) => x.labels[k] === v) ? n + x.value : n), 0)

/** The metric the bench reads batch sizes from (bench/README.md#batches). */
export const BATCH_METRIC = "author_write_batch_size"

/** One operation's batches in a round: how many of each size bucket (upper bounds, not cumulative), their count and summed sizes. */
export interface Batches {
  readonly buckets: ReadonlyArray<readonly [le: number, batches: number]>
  readonly count: number
  readonly sum: number
}

/** What a round added to the service's counters. */
export interface ServiceCounters {
  readonly cache_hits: number
  readonly cache_misses: number
  /** Statements sent to the database, all operations (`begin`, `commit` and the audit writer's included). */
  readonly statements: number
  readonly selects: number
  /** Whether the service declares `author_write_batch_size` at all. */
  readonly batch_metric: boolean
  /** By `operation` label, for the operations that had batches in the round. */
  readonly batches: Readonly<Record<string, Batches>>
}

export const countersDelta = (before: Scrape, after: Scrape): ServiceCounters => {
  const delta = (name: string, where?: Readonly<Record<string, string>>) => total(after, name, where) - total(before, name, where)
  const batches: Record<string, Batches> = {}
  const operations = new Set(after.samples.filter((x) => x.name === `${BATCH_METRIC}_count`).map((x) => x.labels["operation"] ?? ""))
  for (const operation of operations) {
    const count = delta(`${BATCH_METRIC}_count`, { operation })
    if (count <= 0) continue
    const bounds = [...new Set(after.samples.filter((x) => x.name === `${BATCH_METRIC}_bucket` && x.labels["operation"] === operation).map((x) => x.labels["le"] ?? ""))]
      .map((le) => [le, le === "+Inf" ? Infinity : Number(le)] as const)
      .sort((a, b) => a[1] - b[1])
    let below = 0
    const buckets: Array<readonly [number, number]> = []
    for (const [le, bound] of bounds) {
      const cumulative = delta(`${BATCH_METRIC}_bucket`, { operation, le })
      buckets.push([bound, cumulative - below])
      below = cumulative
    }
    batches[operation] = { buckets, count, sum: delta(`${BATCH_METRIC}_sum`, { operation }) }
  }
  return {
    cache_hits: delta("read_cache_hits_total"),
    cache_misses: delta("read_cache_misses_total"),
    statements: delta("db_query_duration_seconds_count"),
    selects: delta("db_query_duration_seconds_count", { operation: "select" }),
    batch_metric: after.declared.has(BATCH_METRIC) || after.samples.some((x) => x.name.startsWith(`${BATCH_METRIC}_`)),
    batches
  }
}

/** The rounds' counters added up. */
export const addCounters = (all: ReadonlyArray<ServiceCounters>): ServiceCounters | undefined => {
  if (all.length === 0) return undefined
  const batches: Record<string, Batches> = {}
  for (const c of all) {
    for (const [operation, b] of Object.entries(c.batches)) {
      const was = batches[operation]
      if (was === undefined) {
        batches[operation] = b
        continue
      }
      const bounds = [...new Set([...was.buckets, ...b.buckets].map(([le]) => le))].sort((x, y) => x - y)
      const at = (x: Batches, le: number) => x.buckets.find(([l]) => l === le)?.[1] ?? 0
      batches[operation] = { buckets: bounds.map((le) => [le, at(was, le) + at(b, le)] as const), count: was.count + b.count, sum: was.sum + b.sum }
    }
  }
  const sum = (key: "cache_hits" | "cache_misses" | "statements" | "selects") => all.reduce((n, c) => n + c[key], 0)
  return {
    cache_hits: sum("cache_hits"),
    cache_misses: sum("cache_misses"),
    statements: sum("statements"),
    selects: sum("selects"),
    batch_metric: all.some((c) => c.batch_metric),
    batches
  }
}

const percent = (part: number, whole: number) => `${Math.round((part * 100) / whole)} %`

/** `1: 40 %, 2: 25 %, 3–4: 20 %, 5–8: 15 % of 1,234 batches, mean 2.9 requests per batch` (buckets with none left out). */
export const formatBatches = (b: Batches): string => {
  let lower = 1
  const parts: Array<string> = []
  for (const [le, n] of b.buckets) {
    const upper = le
    const range = upper === Infinity ? `>${lower - 1}` : Math.floor(upper) <= lower ? String(Math.floor(upper)) : `${lower}–${Math.floor(upper)}`
    if (n > 0) parts.push(`${range}: ${percent(n, b.count)}`)
    lower = Math.floor(upper) + 1
  }
  return `${parts.join(", ")} of ${b.count.toLocaleString("en-US")} batches, mean ${(b.sum / b.count).toFixed(1)} requests per batch`
}

/** The service's read cache and database statements per answered request (undefined for no requests). */
export interface PerRequest {
  readonly cache_hits: number
  readonly cache_misses: number
  readonly statements: number
  readonly selects: number
}

export const perRequest = (c: ServiceCounters, answered: number): PerRequest | undefined => {
  if (answered <= 0) return undefined
  const per = (n: number) => Math.round((n / answered) * 1000) / 1000
  return { cache_hits: per(c.cache_hits), cache_misses: per(c.cache_misses), statements: per(c.statements), selects: per(c.selects) }
}

/**
 * The report's lines for the service's counters: per request its read cache and statements, and
 * the batch sizes of each write operation the workload makes (`writes`) or that had batches;
 * "no batching" while the service has no `author_write_batch_size` histogram.
 */
export const serviceCounterLines = (c: ServiceCounters, p: PerRequest, writes: ReadonlyArray<string>): Array<string> => {
  const f = (n: number) => n.toFixed(3)
  const lines = [`  service per request: read cache ${f(p.cache_hits)} hits, ${f(p.cache_misses)} misses; database statements ${f(p.statements)} (select ${f(p.selects)})`]
  if (!c.batch_metric) {
    if (writes.length > 0) lines.push(`  service batch sizes: no batching (no ${BATCH_METRIC} metric)`)
    return lines
  }
  for (const operation of new Set([...writes, ...Object.keys(c.batches)])) {
    const b = c.batches[operation]
    lines.push(`  service batch sizes (${operation}): ${b === undefined ? "no batches" : formatBatches(b)}`)
  }
  return lines
}
