/**
 * The capacity model of docs/scaling.md: from one bench result file (bench/README.md), the CPU a
 * request of each kind costs the service, PostgreSQL and Redis, and from that how many instances,
 * Redis primaries and PostgreSQL servers a read-heavy and a write-heavy mix need at 10⁴, 10⁵ and
 * 10⁶ requests/s, with the ceilings that do not grow by adding servers (one primary, one lock for
 * notifying commits, one Redis slot per scope or channel, connections). Pure arithmetic.
 */
import type { Cpu, Figures, WorkloadFigures } from "./capacity-figures.ts"

// ---- what a request of each kind costs ------------------------------------------------------------

/** A mix of requests: shares of all requests; reads are id lookups and pages in the share `idShare : 1 − idShare`. */
export interface Mix {
  readonly name: string
  readonly title: string
  readonly reads: number
  readonly idShare: number
  readonly creates: number
  /** Renames and deletes, half each (as W10). */
  readonly renamesDeletes: number
}

export const MIXES: ReadonlyArray<Mix> = [
  { name: "Read-heavy", title: "45 % id lookups, 45 % pages, 10 % creates: W9 as measured", reads: 0.9, idShare: 0.5, creates: 0.1, renamesDeletes: 0 },
  { name: "Write-heavy", title: "25 % id lookups, 25 % pages (W9's reads), 25 % creates (W2), 12.5 % renames and 12.5 % deletes (W10)", reads: 0.5, idShare: 0.5, creates: 0.25, renamesDeletes: 0.25 }
]

/** W9's share of creates (bench/README.md#workloads): the read-heavy mix is W9's. */
const W9_CREATES = MIXES[0]!.creates

export interface Costs {
  /** A read answered without a statement (W1, whose pages are all in the read cache, at 0 selects). */
  readonly hit: Cpu
  /** Each select a read causes (W9's reads against W1). */
  readonly perSelect: Cpu
  readonly create: Cpu
  readonly renameDelete: Cpu
  /** An id lookup's select alone (W6 against W1), when W6 was measured: a check, not used. */
  readonly idSelect: Cpu | undefined
  /** Mean requests per statement of creates (W2) and of renames and deletes (W10); 1 without batching. */
  readonly createBatch: number
  readonly renameDeleteBatch: number
  readonly batching: boolean
}

const cpu = (f: (k: keyof Cpu) => number): Cpu => ({ server: f("server"), pg: f("pg"), redis: f("redis") })

export const deriveCosts = (f: Figures): Costs => {
  const w1 = f.workloads.get("W1")!
  const w9 = f.workloads.get("W9")!
  const w2 = f.workloads.get("W2")!
  const w10 = f.workloads.get("W10")!
  const w6 = f.workloads.get("W6")
  // W9's reads alone: its figures less its creates' share at W2's cost.
  const readsOf9 = cpu((k) => (w9[k] - W9_CREATES * w2[k]) / (1 - W9_CREATES))
  const selectsOf9 = (w9.selects - W9_CREATES * w2.selects) / (1 - W9_CREATES)
  if (selectsOf9 - w1.selects < 0.05) {
    throw new Error(`${f.source}: W9's reads caused ${selectsOf9.toFixed(3)} selects each and W1's ${w1.selects.toFixed(3)}: too close to tell what a select costs`)
  }
  const perSelect = cpu((k) => Math.max(0, (readsOf9[k] - w1[k]) / (selectsOf9 - w1.selects)))
  const hit = cpu((k) => Math.max(0, w1[k] - w1.selects * perSelect[k]))
  const idSelect = w6 === undefined || w6.selects - w1.selects < 0.05 ? undefined : cpu((k) => Math.max(0, (w6[k] - w1[k]) / (w6.selects - w1.selects)))
  /** Requests per statement over the operations' batches; 1 when none were measured. */
  const perStatement = (w: WorkloadFigures, operations: ReadonlyArray<string>) => {
    const seen = operations.flatMap((op) => (w.batches?.[op] === undefined ? [] : [w.batches[op]]))
    const count = seen.reduce((t, b) => t + b.count, 0)
    return count === 0 ? 1 : seen.reduce((t, b) => t + b.sum, 0) / count
  }
  return {
    hit, perSelect, create: cpu((k) => w2[k]), renameDelete: cpu((k) => w10[k]), idSelect,
    createBatch: perStatement(w2, ["create"]),
    renameDeleteBatch: perStatement(w10, ["rename", "delete"]),
    batching: w2.batches !== undefined || w10.batches !== undefined
  }
}

// ---- assumptions ---------------------------------------------------------------------------------------

export interface Assumptions {
  /** Cores one instance may use (the pod's CPU limit, deploy/kubernetes/base/deployment.yaml). */
  readonly instanceCores: number
  /** The share of each ceiling the model plans to use. */
  readonly utilisation: number
  readonly authors: number
  /** Distinct pages read (the bench's page=rand(1..50)). */
  readonly pages: number
  readonly cacheBytes: number
  readonly maxAgeSeconds: number
  /** An id lookup's entry in the read cache: its answer (~85 B), its key (two bytes a character), the fixed overhead per entry. */
  readonly idEntryBytes: number
  readonly idShards: number
  /** One WAL flush: notifying commits go one at a time, each after the previous one's flush. */
  readonly flushMs: number
  /** The most requests one write statement carries. */
  readonly maxBatch: number
  /** Cores of one PostgreSQL server (the primary, each replica). */
  readonly pgCores: number
  readonly pgConnections: number
  /** Per instance: its pool and its LISTEN session. */
  readonly connectionsPerInstance: number
  /** Redis CPU of one read of a scope's generation as its own command (unpipelined); a primary has one core for commands. */
  readonly scopeReadUs: number
  /** Redis CPU of one broadcast delivered to one subscribed instance. */
  readonly deliveryUs: number
  /** Bytes on the wire per request, both ways, headers and bearer token included. */
  readonly bytes: { readonly id: number; readonly page: number; readonly write: number }
}

export const DEFAULTS: Assumptions = {
  instanceCores: 1,
  utilisation: 0.65,
  authors: 1_000_000,
  pages: 50,
  cacheBytes: 33_554_432,
  maxAgeSeconds: 60,
  idEntryBytes: 85 + 2 * 14 + 256,
  idShards: 65_536,
  flushMs: 1,
  maxBatch: 100,
  pgCores: 64,
  pgConnections: 5_000,
  connectionsPerInstance: 11,
  scopeReadUs: 9.3,
  deliveryUs: 1.3,
  bytes: { id: 1_500, page: 3_200, write: 1_550 }
}

// ---- the read cache's hit rate -----------------------------------------------------------------------

/**
 * The share of reads of one key answered from one instance's cache: reads arrive at `a` per second,
 * and an answer lives from its database read until a write moves its scope (at `mu` per second) or
 * `window` seconds pass, whichever is first. Each miss starts an answer's life, whose expected length
 * is L = (1 − e^(−mu·window)) / mu, during which a·L reads hit: hits / reads = a·L / (1 + a·L).
 */
export const hitRatio = (a: number, mu: number, window: number): number => {
  if (a <= 0 || window <= 0) return 0
  const life = mu > 0 ? (1 - Math.exp(-mu * window)) / mu : window
  return (a * life) / (1 + a * life)
}

export interface CacheState {
  readonly idHits: number
  /** Reads of a page answered without a statement. */
  readonly pageHits: number
  /** Statements per read, id lookups and pages together. */
  readonly selectsPerRead: number
}

/**
 * Each instance keeps its own cache, and the load balancer spreads reads evenly, so each sees
 * 1/instances of them. Id lookups are uniform over the authors; an id's answer lives until a write
 * moves its shard (below `idShards` authors, only its own renames and deletes; above, any write of
 * the shard's ids, creates included), 60 s, or, when the cache cannot hold every author, until the
 * LRU evicts it (Che's approximation: K·(1 − e^(−a·t)) = entries that fit). A page's rows live until
 * a rename or delete (creates append: docs/architecture.md#the-read-cache), its total until any write;
 * the total is one entry per instance, shared by every page.
 */
export const cacheState = (mix: Mix, rate: number, instances: number, A: Assumptions): CacheState => {
  const reads = (rate * mix.reads) / instances
  const creates = rate * mix.creates
  const renamesDeletes = rate * mix.renamesDeletes
  const K = A.authors
  const a = (reads * mix.idShare) / K
  const mu = K < A.idShards ? renamesDeletes / K : (renamesDeletes + creates) / A.idShards
  const fits = A.cacheBytes / A.idEntryBytes
  const evictedAfter = K > fits && a > 0 ? -Math.log(1 - fits / K) / a : Infinity
  const idHits = hitRatio(a, mu, Math.min(A.maxAgeSeconds, evictedAfter))
  const pageReads = reads * (1 - mix.idShare)
  const rows = hitRatio(pageReads / A.pages, renamesDeletes, A.maxAgeSeconds)
  const total = hitRatio(pageReads, creates + renamesDeletes, A.maxAgeSeconds)
  const pageSelects = 1 - rows + rows * (1 - total)
  return { idHits, pageHits: 1 - pageSelects, selectsPerRead: mix.idShare * (1 - idHits) + (1 - mix.idShare) * pageSelects }
}

// ---- one step ------------------------------------------------------------------------------------------

export type Ceiling = "PostgreSQL primary CPU" | "notifying commits" | "the list scope's Redis slot" | "the broadcast channel's Redis slot" | "PostgreSQL connections"

export interface Step {
  readonly rate: number
  readonly instances: number
  readonly cache: CacheState
  readonly perRequest: Cpu
  readonly redisPrimaries: number
  /** Cores the primary needs: the selects' too while one server holds them, else they go to replicas. */
  readonly primaryCores: number
  readonly replicas: number
  readonly writes: number
  readonly commits: number
  /** Mean requests per statement for the commits to fit under their ceiling. */
  readonly batchNeeded: number
  readonly connections: number
  readonly gbits: number
  /** Each ceiling's load: 1 = at the planned utilisation. */
  readonly loads: Readonly<Record<Ceiling, number>>
  readonly first: Ceiling
}

const perRequestCost = (mix: Mix, c: Costs, selects: number): Cpu =>
  cpu((k) => mix.reads * (c.hit[k] + selects * c.perSelect[k]) + mix.creates * c.create[k] + mix.renamesDeletes * c.renameDelete[k])

export const step = (mix: Mix, rate: number, c: Costs, A: Assumptions): Step => {
  const perInstance = A.instanceCores * A.utilisation * 1e6
  // More instances split the reads thinner, so each cache hits less and a request costs more: from
  // the all-hits lower bound, up to the fixed point (instances only grow, so this ends).
  let instances = Math.max(1, Math.ceil((rate * perRequestCost(mix, c, 0).server) / perInstance))
  let cache = cacheState(mix, rate, instances, A)
  for (let i = 0; i < 100; i++) {
    const next = Math.max(1, Math.ceil((rate * perRequestCost(mix, c, cache.selectsPerRead).server) / perInstance))
    if (next <= instances) break
    instances = next
    cache = cacheState(mix, rate, instances, A)
  }
  const perRequest = perRequestCost(mix, c, cache.selectsPerRead)
  const ceiling = A.utilisation * 1e6
  const redisPrimaries = Math.max(1, Math.ceil((rate * perRequest.redis) / ceiling))
  const primaryOnly = (rate * (mix.reads * c.hit.pg + mix.creates * c.create.pg + mix.renamesDeletes * c.renameDelete.pg)) / 1e6
  const selectCores = (rate * mix.reads * cache.selectsPerRead * c.perSelect.pg) / 1e6
  const server = A.pgCores * A.utilisation
  const replicas = primaryOnly + selectCores <= server ? 0 : Math.ceil(selectCores / server)
  const primaryCores = replicas === 0 ? primaryOnly + selectCores : primaryOnly
  const writes = rate * (mix.creates + mix.renamesDeletes)
  const commits = rate * (mix.creates / c.createBatch + mix.renamesDeletes / c.renameDeleteBatch)
  const commitCeiling = (A.utilisation * 1000) / A.flushMs
  const pageReads = rate * mix.reads * (1 - mix.idShare)
  const connections = instances * A.connectionsPerInstance
  const loads: Record<Ceiling, number> = {
    "PostgreSQL primary CPU": primaryCores / server,
    "notifying commits": commits / commitCeiling,
    "the list scope's Redis slot": ((pageReads + writes) * A.scopeReadUs) / ceiling,
    // One channel: each write's broadcast goes from one primary to every instance.
    "the broadcast channel's Redis slot": (writes * instances * A.deliveryUs) / ceiling,
    "PostgreSQL connections": connections / A.pgConnections
  }
  const first = (Object.keys(loads) as Array<Ceiling>).reduce((x, y) => (loads[y] > loads[x] ? y : x))
  const bytes = rate * (mix.reads * (mix.idShare * A.bytes.id + (1 - mix.idShare) * A.bytes.page) + (mix.creates + mix.renamesDeletes) * A.bytes.write)
  return {
    rate, instances, cache, perRequest, redisPrimaries, primaryCores, replicas, writes, commits,
    batchNeeded: writes / commitCeiling, connections, gbits: (bytes * 8) / 1e9, loads, first
  }
}

export const STEPS = [10_000, 100_000, 1_000_000] as const
