/**
 * The tables of docs/scaling.md, as Markdown, from the model of bench/lib/capacity.ts: the
 * measured figures, the costs derived from them, the assumptions, and per mix what each step needs
 * and which ceiling it comes closest to.
 */
import { type Assumptions, cacheState, type Ceiling, type Costs, deriveCosts, type Mix, MIXES, step, type Step, STEPS } from "./capacity.ts"
import type { Cpu, Figures } from "./capacity-figures.ts"

export const BEGIN = "<!-- capacity:begin — written by `node bench/capacity.ts --write`; do not edit by hand -->"
export const END = "<!-- capacity:end -->"

const n = (x: number, digits = 0) => x.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })
const pct = (x: number) => `${x >= 0.1 ? n(x * 100) : n(x * 100, 1)} %`
const rateLabel = (rate: number) => `10${"⁰¹²³⁴⁵⁶⁷⁸⁹"[Math.round(Math.log10(rate))]}`
const row = (cells: ReadonlyArray<string>) => `| ${cells.join(" | ")} |`
const table = (head: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) =>
  [row(head), row(head.map(() => "---")), ...rows.map(row)].join("\n")
const cpuCells = (c: Cpu) => [n(c.server), n(c.pg), n(c.redis)]

const WORKLOAD_NAMES: Record<string, string> = {
  W1: "W1 pages", W6: "W6 id lookups", W9: "W9 mixed", W2: "W2 creates", W10: "W10 renames, deletes"
}

const measured = (f: Figures) =>
  table(
    ["Workload", "req/s", "CPU µs per request: service", "PostgreSQL", "Redis", "read cache hits / misses per request", "statements (selects) per request", "requests per write statement"],
    ["W1", "W6", "W9", "W2", "W10"].flatMap((id) => {
      const w = f.workloads.get(id)
      if (w === undefined) return []
      const batches = w.batches === undefined ? "no batching" : Object.entries(w.batches).map(([op, b]) => `${op} ${n(b.sum / b.count, 1)}`).join(", ") || "–"
      return [[WORKLOAD_NAMES[id] ?? id, n(w.rps), ...cpuCells(w), `${n(w.hits, 2)} / ${n(w.misses, 2)}`, `${n(w.statements, 2)} (${n(w.selects, 2)})`,
        ["W1", "W6"].includes(id) ? "–" : batches]]
    })
  )

const derived = (c: Costs) =>
  table(["CPU µs", "service", "PostgreSQL", "Redis", "from"], [
    ["a read the cache answers", ...cpuCells(c.hit), "W1 (its pages are in the cache), less its few selects"],
    ["each select a read causes", ...cpuCells(c.perSelect), "W9's reads (W9 less 10 % of W2) against W1, by selects per read"],
    ["a create", ...cpuCells(c.create), "W2"],
    ["a rename or a delete", ...cpuCells(c.renameDelete), "W10"],
    ...(c.idSelect === undefined ? [] : [["an id lookup's select alone (a check: the model does not use it)", ...cpuCells(c.idSelect), "W6 against W1"]])
  ])

const assumptions = (A: Assumptions, c: Costs) => {
  const entries = Math.floor(A.cacheBytes / A.idEntryBytes)
  return table(["Assumption", "Value", "Measured here, or assumed"], [
    ["Cores per instance", n(A.instanceCores), "assumed: the pod's CPU limit (`deploy/kubernetes/base/deployment.yaml`); the service's CPU per request counts all its threads"],
    ["Planned utilisation of every ceiling", pct(A.utilisation), "assumed: room for bursts, for an instance lost, for garbage collection pauses"],
    ["Authors", n(A.authors), `assumed; id lookups uniform over them, pages over the first ${n(A.pages)} (as the bench's)`],
    ["Read cache per instance", `${n(A.cacheBytes / 2 ** 20)} MiB, answers at most ${n(A.maxAgeSeconds)} s old`, "the defaults (`READ_CACHE_MAX_BYTES`, `READ_CACHE_MAX_AGE_SECONDS`)"],
    ["An id lookup's entry in the cache", `${n(A.idEntryBytes)} B: ${n(entries)} fit`, "from the code: its answer (~85 B), its key, 256 B of overhead per entry"],
    ["Id shards of the read cache", n(A.idShards), "from the code"],
    ["WAL flush of a commit", `${n(A.flushMs, 1)} ms: at most ${n(1000 / A.flushMs)} notifying commits/s`, "assumed (network-attached storage, or local flash with a synchronous standby); measured here: 2–4 ms, about 400 notifying inserts/s"],
    ["Requests per write statement", c.batching ? `as measured (creates ${n(c.createBatch, 1)}, renames and deletes ${n(c.renameDeleteBatch, 1)}), at most ${n(A.maxBatch)}` : `1 (no batching measured), at most ${n(A.maxBatch)} once batched`, "measured here (`author_write_batch_size`); the bound assumed"],
    ["A PostgreSQL server", `${n(A.pgCores)} cores; ${n(A.pgConnections)} connections`, "assumed (a large managed instance); CPU per request as measured on 2 cores, scaled linearly"],
    ["Connections per instance", n(A.connectionsPerInstance), "`DATABASE_POOL_MAX` (10) and the change feed's LISTEN session"],
    ["A Redis primary", "one core for commands; CPU per request as measured", "measured here: one server on loopback, no TLS"],
    ["A scope's generation read as its own command", `${n(A.scopeReadUs, 1)} µs`, "measured here: `redis-benchmark` HMGET, 50 clients, unpipelined (0.9 µs at 16 deep)"],
    ["A broadcast delivered to one instance", `${n(A.deliveryUs, 1)} µs`, "measured here: `redis-benchmark` PUBLISH of a 120-byte event to 50 subscribers, unpipelined (0.2 µs at 16 deep)"],
    ["Bytes per request, both ways", `id lookup ${n(A.bytes.id)}, page ${n(A.bytes.page)}, write ${n(A.bytes.write)}`, "measured here with curl (headers, body, a 766-byte bearer token); TLS and TCP add to it"]
  ])
}

const ACTIONS: Record<Ceiling, (s: Step, A: Assumptions) => string> = {
  "notifying commits": (s, A) => (s.batchNeeded > A.maxBatch ? "past one primary" : `batches of ≥ ${s.batchNeeded < 10 ? n(Math.ceil(s.batchNeeded * 10) / 10, 1) : n(Math.ceil(s.batchNeeded))}`),
  "PostgreSQL primary CPU": () => "past one primary",
  "the list scope's Redis slot": () => "past one slot",
  "the broadcast channel's Redis slot": () => "past one slot",
  "PostgreSQL connections": () => "a pooler"
}

/** The ceiling closest to its load, or every ceiling past it (the highest first), each with what it takes. */
const firstCell = (s: Step, A: Assumptions) => {
  const past = (Object.keys(s.loads) as Array<Ceiling>).filter((c) => s.loads[c] > 1).sort((x, y) => s.loads[y] - s.loads[x])
  if (past.length === 0) return `${s.first} (${pct(s.loads[s.first])})`
  return past.map((c) => `${c} (${pct(s.loads[c])}): **${ACTIONS[c](s, A)}**`).join("; ")
}

const mixTables = (mix: Mix, c: Costs, A: Assumptions) => {
  const steps = STEPS.map((rate) => step(mix, rate, c, A))
  const sizing = table(
    ["req/s", "instances", "Redis primaries", "PostgreSQL primary", "replicas", "id lookups from the cache", "pages from the cache", "selects per read", "CPU µs per request: service / PostgreSQL / Redis", "traffic at the edge"],
    steps.map((s) => [rateLabel(s.rate), n(s.instances), n(s.redisPrimaries), `${n(s.primaryCores, 1)} cores`, n(s.replicas), pct(s.cache.idHits), pct(s.cache.pageHits),
      n(s.cache.selectsPerRead, 2), `${n(s.perRequest.server)} / ${n(s.perRequest.pg)} / ${n(s.perRequest.redis)}`, `${n(s.gbits, 1)} Gbit/s`])
  )
  const ceilings = table(
    ["req/s", "writes/s", `notifying commits/s (of ${n((A.utilisation * 1000) / A.flushMs)})`, "mean batch needed", "PostgreSQL primary CPU", "the list scope's Redis slot",
      "the broadcast channel's Redis slot", "PostgreSQL connections", "first to saturate"],
    steps.map((s) => [rateLabel(s.rate), n(s.writes), `${n(s.commits)} (${pct(s.loads["notifying commits"])})`, n(s.batchNeeded, 1), pct(s.loads["PostgreSQL primary CPU"]),
      pct(s.loads["the list scope's Redis slot"]), pct(s.loads["the broadcast channel's Redis slot"]), `${n(s.connections)} (${pct(s.loads["PostgreSQL connections"])})`, firstCell(s, A)])
  )
  return [`#### ${mix.name}: ${mix.title}`, "", sizing, "", ceilings].join("\n")
}

/** The read-heavy mix's id lookups as the authors grow, at each step (the instances of that step). */
const cardinality = (c: Costs, A: Assumptions) => {
  const mix = MIXES[0]!
  return table(["Authors", ...STEPS.map((r) => `${rateLabel(r)} req/s`)], [10_000, 100_000, 1_000_000, 10_000_000].map((authors) => {
    const a = { ...A, authors }
    return [n(authors), ...STEPS.map((rate) => {
      const s = step(mix, rate, c, a)
      return `${pct(cacheState(mix, rate, s.instances, a).idHits)} (${n(s.instances)} instances)`
    })]
  }))
}

/** How much rides on the cost of a select: the read-heavy mix at the top step with W6's instead. */
const checkWithIdSelects = (c: Costs, A: Assumptions) => {
  if (c.idSelect === undefined) return ""
  const mix = MIXES[0]!
  const rate = STEPS.at(-1)!
  const used = step(mix, rate, c, A)
  const alone = step(mix, rate, { ...c, perSelect: c.idSelect }, A)
  const than = c.perSelect.server >= c.idSelect.server ? "more" : "less"
  return `A select in W9's reads costs the service ${than} than an id lookup's select alone in W6; were it to cost W6's, the read-heavy mix at ${rateLabel(rate)} req/s\n` +
    `would need ${n(alone.instances)} instances and ${n(alone.replicas)} replicas instead of ${n(used.instances)} and ${n(used.replicas)}.`
}

/** The generated part of docs/scaling.md, between its markers. */
export const renderCapacity = (f: Figures, A: Assumptions): string => {
  const c = deriveCosts(f)
  const batching = c.batching
    ? `Write statements carried on average ${n(c.createBatch, 1)} creates (W2) and ${n(c.renameDeleteBatch, 1)} renames or deletes (W10).`
    : "The service had no batch metric (`author_write_batch_size`): one statement, and one notifying commit, per write."
  const check = checkWithIdSelects(c, A)
  return [
    BEGIN,
    "",
    `Computed from \`${f.source}\` (run ${f.startedAt}: ${f.options}; ${f.machine}),`,
    "whose figures are kept in `bench/capacity-figures.json`.",
    "PostgreSQL's CPU is " +
      (f.pgFigure === "cluster" ? "every process of its cluster (the WAL writer and checkpointer included)." : "its backends on the bench database only."),
    "",
    "### The measured figures",
    "",
    measured(f),
    "",
    "### What a request costs",
    "",
    derived(c),
    "",
    batching,
    ...(check === "" ? [] : [check]),
    "",
    "### Assumptions",
    "",
    assumptions(A, c),
    "",
    "### Per mix and step",
    "",
    ...MIXES.flatMap((mix) => [mixTables(mix, c, A), ""]),
    "#### Id lookups from the cache as the authors grow (read-heavy)",
    "",
    cardinality(c, A),
    "",
    END
  ].join("\n")
}
