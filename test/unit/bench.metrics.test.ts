/**
 * `npm run bench` reads the service's own counters from its `/metrics` around each round
 * (bench/lib/metrics.ts): read cache hits and misses, statements, and the sizes of its write
 * batches. These pin how a scrape is read and what the report prints, without starting a server.
 */
import { describe, expect, it } from "vitest"
import { addCounters, countersDelta, formatBatches, parseMetrics, perRequest, serviceCounterLines } from "../../bench/lib/metrics.ts"

/** A scrape as prom-client writes it: the cache's counters, statements by operation, and (when given) batch sizes. */
const scrape = (o: { hits: number; misses: number; select: number; insert: number; creates?: ReadonlyArray<number> }) => {
  const lines = [
    "# HELP read_cache_hits_total Author reads answered from the read cache",
    "# TYPE read_cache_hits_total counter",
    `read_cache_hits_total ${o.hits}`,
    "# TYPE read_cache_misses_total counter",
    `read_cache_misses_total ${o.misses}`,
    "# TYPE db_query_duration_seconds histogram",
    `db_query_duration_seconds_bucket{le="0.001",operation="select"} ${o.select}`,
    `db_query_duration_seconds_count{operation="select"} ${o.select}`,
    `db_query_duration_seconds_sum{operation="select"} 0.5`,
    `db_query_duration_seconds_count{operation="insert"} ${o.insert}`
  ]
  if (o.creates !== undefined) {
    // Cumulative buckets 1, 2, 4, 8, +Inf of the batch sizes observed so far.
    lines.push("# TYPE author_write_batch_size histogram")
    for (const le of [1, 2, 4, 8, Infinity]) {
      const label = le === Infinity ? "+Inf" : String(le)
      lines.push(`author_write_batch_size_bucket{le="${label}",operation="create"} ${o.creates.filter((n) => n <= le).length}`)
    }
    lines.push(`author_write_batch_size_sum{operation="create"} ${o.creates.reduce((a, b) => a + b, 0)}`)
    lines.push(`author_write_batch_size_count{operation="create"} ${o.creates.length}`)
  }
  return parseMetrics(lines.join("\n"))
}

describe("bench: the service's counters around a round", () => {
  it("reads samples with their labels, escaped values included, and the declared names", () => {
    const s = parseMetrics([
      "# TYPE app_info gauge",
      "app_info{version=\"1.1.0\",runtime=\"node \\\"24\\\"\"} 1",
      "process_cpu_seconds_total 12.5 1700000000000",
      "h_bucket{le=\"+Inf\"} 3"
    ].join("\n"))
    expect(s.samples).toEqual([
      { name: "app_info", labels: { version: "1.1.0", runtime: "node \"24\"" }, value: 1 },
      { name: "process_cpu_seconds_total", labels: {}, value: 12.5 },
      { name: "h_bucket", labels: { le: "+Inf" }, value: 3 }
    ])
    expect([...s.declared]).toEqual(["app_info"])
  })

  it("gives a round's cache hits, misses and statements, and says when the service does not batch", () => {
    const c = countersDelta(scrape({ hits: 100, misses: 10, select: 50, insert: 5 }), scrape({ hits: 190, misses: 15, select: 80, insert: 25 }))
    expect(c).toEqual({ cache_hits: 90, cache_misses: 5, statements: 50, selects: 30, batch_metric: false, batches: {} })
    const p = perRequest(c, 100)!
    expect(p).toEqual({ cache_hits: 0.9, cache_misses: 0.05, statements: 0.5, selects: 0.3 })
    expect(perRequest(c, 0)).toBeUndefined()
    expect(serviceCounterLines(c, p, ["create"])).toEqual([
      "  service per request: read cache 0.900 hits, 0.050 misses; database statements 0.500 (select 0.300)",
      "  service batch sizes: no batching (no author_write_batch_size metric)"
    ])
    expect(serviceCounterLines(c, p, [])).toHaveLength(1) // a read-only workload has no batch line
  })

  it("turns the histogram's cumulative buckets into the round's batches by size, over all rounds", () => {
    const before = scrape({ hits: 0, misses: 0, select: 0, insert: 0, creates: [1, 1] })
    const middle = scrape({ hits: 0, misses: 0, select: 0, insert: 0, creates: [1, 1, 1, 2, 3, 4, 7] })
    const after = scrape({ hits: 0, misses: 0, select: 0, insert: 0, creates: [1, 1, 1, 2, 3, 4, 7, 16, 1] })
    const first = countersDelta(before, middle)
    expect(first.batch_metric).toBe(true)
    expect(first.batches["create"]).toEqual({ buckets: [[1, 1], [2, 1], [4, 2], [8, 1], [Infinity, 0]], count: 5, sum: 17 })
    const both = addCounters([first, countersDelta(middle, after)])!
    expect(both.batches["create"]).toEqual({ buckets: [[1, 2], [2, 1], [4, 2], [8, 1], [Infinity, 1]], count: 7, sum: 34 })
    expect(formatBatches(both.batches["create"]!)).toBe("1: 29 %, 2: 14 %, 3–4: 29 %, 5–8: 14 %, >8: 14 % of 7 batches, mean 4.9 requests per batch")
    const lines = serviceCounterLines(both, perRequest(both, 34)!, ["create", "rename"])
    expect(lines.slice(1)).toEqual([
      "  service batch sizes (create): 1: 29 %, 2: 14 %, 3–4: 29 %, 5–8: 14 %, >8: 14 % of 7 batches, mean 4.9 requests per batch",
      "  service batch sizes (rename): no batches"
    ])
    expect(addCounters([])).toBeUndefined()
  })
})
