/**
 * Reading the service's metrics in tests: the Prometheus text format (0.0.4) of `GET /metrics` or
 * of an in-process registry, or one prom-client metric of this process, as samples to query.
 *
 * Samples are selected by name and a `LabelMatch`: a label subset (every given label has that
 * value; the sample may carry others) or a predicate over the labels. The readers differ only in
 * what a missing or repeated series gives — pick the one whose semantic the assertion needs:
 * `value` (exactly one, else throws), `first` (undefined when none), `firstOrZero` (0 when none: a
 * labelled series is exported only once touched) and `sum` (over every match, 0 when none).
 */

/** One line of the exposition: a series and its value (label values as written, still escaped). */
export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** Which samples of a name: a label subset, or a predicate over the labels. */
export type LabelMatch = Readonly<Record<string, string>> | ((labels: Readonly<Record<string, string>>) => boolean)

export interface Metrics {
  /** Every sample, in exposition order. */
  readonly samples: ReadonlyArray<Sample>
  /** Metric family → kind, from the `# TYPE` lines. */
  readonly types: ReadonlyMap<string, string>
  /** The samples named `name` that `match` selects (all of them without `match`). */
  readonly find: (name: string, match?: LabelMatch) => Array<Sample>
  /** The value of the one sample selected; throws when there is none or more than one. */
  readonly value: (name: string, match?: LabelMatch) => number
  /** The value of the first sample selected; undefined when there is none. */
  readonly first: (name: string, match?: LabelMatch) => number | undefined
  /** The value of the first sample selected; 0 when there is none. */
  readonly firstOrZero: (name: string, match?: LabelMatch) => number
  /** The sum of the values of every sample selected; 0 when there is none. */
  readonly sum: (name: string, match?: LabelMatch) => number
}

const selects = (match: LabelMatch, labels: Readonly<Record<string, string>>) =>
  typeof match === "function" ? match(labels) : Object.entries(match).every(([k, v]) => labels[k] === v)

const metricsOf = (samples: ReadonlyArray<Sample>, types: ReadonlyMap<string, string>): Metrics => {
  const find = (name: string, match: LabelMatch = {}) => samples.filter((s) => s.name === name && selects(match, s.labels))
  const describe = (name: string, match: LabelMatch) => `${name}${typeof match === "function" ? "{…}" : JSON.stringify(match)}`
  return {
    samples,
    types,
    find,
    value: (name, match = {}) => {
      const found = find(name, match)
      if (found.length !== 1) throw new Error(`expected one ${describe(name, match)}, found ${found.length}`)
      return found[0]!.value
    },
    first: (name, match) => find(name, match)[0]?.value,
    firstOrZero: (name, match) => find(name, match)[0]?.value ?? 0,
    sum: (name, match) => find(name, match).reduce((total, s) => total + s.value, 0)
  }
}

/** Parses the Prometheus text format (0.0.4) into samples and `# TYPE` lines; throws on a line not of the form `name{labels} value`. */
export const parseMetrics = (text: string): Metrics => {
  const samples: Array<Sample> = []
  const types = new Map<string, string>()
  for (const line of text.split("\n")) {
    if (line.startsWith("# TYPE ")) {
      const [, , name, kind] = line.split(" ")
      types.set(name!, kind!)
      continue
    }
    if (line === "" || line.startsWith("#")) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line)
    if (!match) throw new Error(`unparsable metrics line: ${line}`)
    const labels: Record<string, string> = {}
    for (const m of (match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]!] = m[2]!
    samples.push({ name: match[1]!, labels, value: Number(match[3]) })
  }
  return metricsOf(samples, types)
}

/** `GET {baseUrl}/metrics` (status not checked), parsed. */
export const scrapeMetrics = async (baseUrl: string): Promise<Metrics> => parseMetrics(await (await fetch(`${baseUrl}/metrics`)).text())

/** The exposition of a prom-client registry of this process (e.g. the service's `registry`), parsed. */
export const readRegistry = async (registry: { readonly metrics: () => Promise<string> }): Promise<Metrics> =>
  parseMetrics(await registry.metrics())

/** What prom-client's `get()` gives of a counter, gauge, histogram or summary. */
interface PromMetric {
  readonly get: () => Promise<{
    readonly name: string
    /** prom-client declares a numeric enum; at run time it is the kind as `# TYPE` writes it ("counter"). */
    readonly type: unknown
    readonly values: ReadonlyArray<{
      readonly value: number
      readonly labels: Readonly<Record<string, string | number | undefined>>
      readonly metricName?: string
    }>
  }>
}

/**
 * One prom-client metric of this process as its `get()` gives it (no exposition text in between):
 * each value is a sample named by its series (`metricName`, e.g. `_bucket`, else the metric's name).
 */
export const readMetric = async (metric: PromMetric): Promise<Metrics> => {
  const { name, type, values } = await metric.get()
  const samples = values.map((v): Sample => ({
    name: v.metricName ?? name,
    labels: Object.fromEntries(Object.entries(v.labels).flatMap(([k, l]) => (l === undefined ? [] : [[k, String(l)]]))),
    value: v.value
  }))
  return metricsOf(samples, new Map([[name, String(type)]]))
}
