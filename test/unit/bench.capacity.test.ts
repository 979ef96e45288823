/**
 * The capacity model of docs/scaling.md (bench/capacity.ts, bench/lib/capacity.ts): its arithmetic
 * on a small result file whose figures make every derived cost a round number, the read cache's
 * hit rate against its closed form, the script itself run on that file, and the page's tables
 * being the script's output on the figures kept beside it.
 */
import { spawnSync } from "node:child_process"
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { cacheState, deriveCosts, DEFAULTS, hitRatio, type Mix, MIXES, step } from "../../bench/lib/capacity.ts"
import { readFigures, trimResult } from "../../bench/lib/capacity-figures.ts"
import { BEGIN, END, renderCapacity } from "../../bench/lib/capacity-report.ts"
import { listKey } from "../../src/Authors/ReadAnswers.ts"
import { ID_SHARDS } from "../../src/Authors/Generations.ts"
import { ENTRY_OVERHEAD_BYTES } from "../../src/Authors/ReadCache.ts"

const ROOT = process.cwd()
const FIXTURE = "test/fixtures/bench-result.json"
const fixture = () => JSON.parse(readFileSync(join(ROOT, FIXTURE), "utf8")) as { workloads: Array<{ id: string; service: Record<string, unknown> }>; backends: Record<string, string> }
const figures = (result: unknown = fixture()) => readFigures(result, FIXTURE)
const [readHeavy, writeHeavy] = MIXES as [Mix, Mix]

/** The fixture with the service's batch histogram: 1,000 creates in 250 statements, 500 renames and deletes in 200. */
const withBatches = () => {
  const result = fixture()
  const batches: Record<string, Record<string, { count: number; sum: number; buckets: Array<[number, number]> }>> = {
    W2: { create: { count: 250, sum: 1000, buckets: [] } },
    W10: { rename: { count: 100, sum: 200, buckets: [] }, delete: { count: 100, sum: 300, buckets: [] } }
  }
  for (const w of result.workloads) {
    const counters = w.service["counters"] as Record<string, unknown>
    counters["batch_metric"] = true
    counters["batches"] = batches[w.id] ?? {}
  }
  return result
}

const run = (args: ReadonlyArray<string>, cwd = ROOT) => spawnSync(process.execPath, ["bench/capacity.ts", ...args], { cwd, encoding: "utf8", timeout: 60_000 })

describe("bench/capacity.ts: the costs it derives", () => {
  it("a cached read from W1, each select from W9's reads against W1, writes from W2 and W10, the check from W6", () => {
    const c = deriveCosts(figures())
    // W9 less 10 % of W2, over 0.9: (220 − 40) / 0.9 = 200 µs at 0.45 / 0.9 = 0.5 selects per read; W1: 100 µs at none.
    expect(c.hit).toEqual({ server: 100, pg: 20, redis: 20 })
    expect(c.perSelect.server).toBeCloseTo(200, 9)
    expect(c.perSelect.pg).toBeCloseTo(100, 9) // ((93 − 30) / 0.9 − 20) / 0.5
    expect(c.perSelect.redis).toBeCloseTo(0, 9) // (24 − 6) / 0.9 = 20, W1's
    expect(c.create).toEqual({ server: 400, pg: 300, redis: 60 })
    expect(c.renameDelete).toEqual({ server: 500, pg: 400, redis: 80 })
    expect(c.idSelect).toEqual({ server: 100, pg: 80, redis: 0 })
    expect([c.createBatch, c.renameDeleteBatch, c.batching]).toEqual([1, 1, false])
  })

  it("requests per write statement from the batch histogram when the result has it: creates 1000 / 250, renames and deletes 500 / 200", () => {
    const c = deriveCosts(figures(withBatches()))
    expect([c.createBatch, c.renameDeleteBatch, c.batching]).toEqual([4, 2.5, true])
    const s = step(writeHeavy, 10_000, c, DEFAULTS)
    expect(s.commits).toBeCloseTo(10_000 * (0.25 / 4 + 0.25 / 2.5), 9)
    expect(s.loads["notifying commits"]).toBeCloseTo(1625 / 650, 9)
  })

  it("PostgreSQL's figure is the cluster's, or the bench database's backends on request", () => {
    expect(figures().workloads.get("W2")!.pg).toBe(300)
    expect(readFigures(fixture(), FIXTURE, "own").workloads.get("W2")!.pg).toBe(270)
  })

  it("a trimmed copy of the result gives the same figures as the result", () => {
    const trimmed = JSON.parse(JSON.stringify(trimResult(fixture(), FIXTURE))) as unknown
    expect(readFigures(trimmed, "elsewhere.json")).toEqual(figures())
    expect(readFigures(trimResult(withBatches(), FIXTURE), FIXTURE)).toEqual(figures(withBatches()))
  })
})

describe("bench/capacity.ts: the read cache's hit rate", () => {
  it("a·L / (1 + a·L), an answer living until its scope moves or the window ends", () => {
    expect(hitRatio(1, 0, 60)).toBeCloseTo(60 / 61, 12)
    // L = (1 − e^(−0.5·60)) / 0.5 ≈ 2: a·L ≈ 4.
    expect(hitRatio(2, 0.5, 60)).toBeCloseTo(0.8, 9)
    expect(hitRatio(0, 1, 60)).toBe(0)
  })

  it("falls as the instances split the reads and as the authors grow; the exact total re-read after every write", () => {
    const reads: Mix = { name: "reads", title: "", reads: 1, idShare: 0.5, creates: 0, renamesDeletes: 0 }
    const a = { ...DEFAULTS, authors: 10_000 }
    // No writes: an id answer lives 60 s; 10,000 authors fit in the cache.
    expect(cacheState(reads, 10_000, 5, a).idHits).toBeCloseTo(hitRatio(10_000 * 0.5 / 5 / 10_000, 0, 60), 12)
    // A page: its rows (50 keys) and the total (one key, shared), each kept at most 60 s.
    expect(cacheState(reads, 10_000, 5, a).pageHits).toBeCloseTo(hitRatio(10_000 * 0.5 / 5 / 50, 0, 60) * hitRatio(10_000 * 0.5 / 5, 0, 60), 12)
    expect(cacheState(reads, 10_000, 50, a).idHits).toBeLessThan(cacheState(reads, 10_000, 5, a).idHits)
    expect(cacheState(reads, 10_000, 5, { ...a, authors: 1_000_000 }).idHits).toBeLessThan(cacheState(reads, 10_000, 5, a).idHits)
    // Creates append: pages keep their rows and re-read the total, which every write moves.
    const s = cacheState(readHeavy, 10_000, 5, a)
    const total = hitRatio(10_000 * 0.9 * 0.5 / 5, 1000, 60)
    expect(s.pageHits).toBeCloseTo(total * hitRatio(10_000 * 0.9 * 0.5 / 5 / 50, 0, 60), 12)
    expect(s.selectsPerRead).toBeCloseTo(0.5 * (1 - s.idHits) + 0.5 * (1 - s.pageHits), 12)
  })
})

describe("bench/capacity.ts: one step", () => {
  it("write-heavy at 10⁴ req/s: each part's arithmetic, at the instances' fixed point", () => {
    const c = deriveCosts(figures())
    const s = step(writeHeavy, 10_000, c, DEFAULTS)
    const σ = s.cache.selectsPerRead
    // Per request: half reads (100 + 200·σ), a quarter creates (400), a quarter renames and deletes (500).
    expect(s.perRequest.server).toBeCloseTo(0.5 * (100 + 200 * σ) + 100 + 125, 9)
    expect(s.instances).toBe(Math.ceil(10_000 * s.perRequest.server / 650_000))
    // A fixed point: the instances found give the hit rate that needs them.
    expect(cacheState(writeHeavy, 10_000, s.instances, DEFAULTS)).toEqual(s.cache)
    expect(s.redisPrimaries).toBe(Math.ceil(10_000 * (0.5 * 20 + 0.25 * 60 + 0.25 * 80) / 650_000))
    // The primary: every request's cached-read share (the audit trail), the writes, and here the selects (it has room).
    expect(s.replicas).toBe(0)
    expect(s.primaryCores).toBeCloseTo(10_000 * (0.5 * 20 + 0.25 * 300 + 0.25 * 400 + 0.5 * σ * 100) / 1e6, 9)
    expect(s.writes).toBe(5000)
    expect(s.commits).toBe(5000)
    expect(s.batchNeeded).toBeCloseTo(5000 / 650, 9) // 1 ms flush, 65 %
    expect(s.loads["the list scope's Redis slot"]).toBeCloseTo((2500 + 5000) * 9.3 / 650_000, 9)
    expect(s.loads["the broadcast channel's Redis slot"]).toBeCloseTo(5000 * s.instances * 1.3 / 650_000, 9)
    expect(s.connections).toBe(s.instances * 11)
    expect(s.gbits).toBeCloseTo(10_000 * (0.25 * 1500 + 0.25 * 3200 + 0.5 * 1550) * 8 / 1e9, 9)
    expect(s.first).toBe("notifying commits")
  })

  it("selects go to replicas once one server cannot hold them with the primary's own work", () => {
    const c = deriveCosts(figures())
    const s = step(readHeavy, 1_000_000, c, { ...DEFAULTS, pgCores: 16 })
    const selectCores = 1_000_000 * 0.9 * s.cache.selectsPerRead * 100 / 1e6
    expect(s.replicas).toBe(Math.ceil(selectCores / (16 * 0.65)))
    expect(s.primaryCores).toBeCloseTo(1_000_000 * (0.9 * 20 + 0.1 * 300) / 1e6, 9)
  })
})

describe("bench/capacity.ts, the script", () => {
  const scratch = mkdtempSync(join(tmpdir(), "capacity-"))
  afterAll(() => rmSync(scratch, { recursive: true, force: true }))

  it("prints the tables of a result file", () => {
    const out = run([FIXTURE])
    expect(out.stderr).toBe("")
    expect(out.status).toBe(0)
    expect(out.stdout).toContain("| a create | 400 | 300 | 60 | W2 |")
    expect(out.stdout).toContain("| each select a read causes | 200 | 100 | 0 |")
    expect(out.stdout).toContain("one statement, and one notifying commit, per write")
    expect(out.stdout).toMatch(/^\| 10⁴ \| 5,000 \| 5,000 \(769 %\) \| 7\.7 \|/m)
  })

  it("says what is missing: a workload, or PostgreSQL and Redis", () => {
    const result = fixture()
    result.workloads = result.workloads.filter((w) => w.id !== "W10")
    const noW10 = join(scratch, "no-w10.json")
    const pglite = join(scratch, "pglite.json")
    writeFileSync(noW10, JSON.stringify(result))
    writeFileSync(pglite, JSON.stringify({ ...fixture(), backends: { database: "pglite", redis: "in-process" } }))
    const missing = run([noW10])
    expect(missing.status).toBe(2)
    expect(missing.stderr).toContain("no W10; run `npm run bench -- --only W1,W2,W6,W9,W10")
    expect(run([pglite]).stderr).toContain("the model needs PostgreSQL + Redis")
    expect(run(["--write", "--authors", "5", FIXTURE]).stderr).toContain("--write puts the default assumptions")
  })

  it("docs/scaling.md's tables are its output on the figures kept in bench/capacity-figures.json", () => {
    const page = readFileSync(join(ROOT, "docs/scaling.md"), "utf8")
    const generated = page.slice(page.indexOf(BEGIN), page.indexOf(END) + END.length)
    const kept = JSON.parse(readFileSync(join(ROOT, "bench/capacity-figures.json"), "utf8")) as unknown
    expect(generated).toBe(renderCapacity(readFigures(kept, "bench/capacity-figures.json"), DEFAULTS))
  })

  it("the page's example, line by line, in a copy of the repository's files: print, --write the newest result, other assumptions", () => {
    const page = readFileSync(join(ROOT, "docs/scaling.md"), "utf8")
    const block = /```sh example=capacity\n([\s\S]*?)```/.exec(page)![1]!
    const lines = block.split("\n").filter((l) => l.trim() !== "")
    const copy = join(scratch, "repo")
    for (const file of ["bench/capacity.ts", "bench/lib/capacity.ts", "bench/lib/capacity-figures.ts", "bench/lib/capacity-report.ts", "bench/capacity-figures.json", "docs/scaling.md"]) {
      mkdirSync(join(copy, file, ".."), { recursive: true })
      copyFileSync(join(ROOT, file), join(copy, file))
    }
    mkdirSync(join(copy, "bench/results"), { recursive: true })
    copyFileSync(join(ROOT, FIXTURE), join(copy, "bench/results/2026-11-28T00-00-00-000Z.json"))
    copyFileSync(join(ROOT, FIXTURE), join(copy, "bench/results/2026-11-29T00-00-00-000Z.json"))
    const outputs = lines.map((line) => {
      const out = spawnSync("sh", ["-c", line], { cwd: copy, encoding: "utf8", timeout: 60_000, env: { PATH: `${join(process.execPath, "..")}:${process.env["PATH"] ?? ""}` } })
      expect(out.status, `${line}\n${out.stderr}`).toBe(0)
      return out.stdout
    })
    expect(lines.map((l) => l.split(/\s+/).slice(0, 2).join(" "))).toEqual(lines.map(() => "node bench/capacity.ts"))
    // Printed: the page's tables. Written: the newest result's, and its figures kept.
    expect(page).toContain(outputs[0]!.trimEnd())
    const written = readFileSync(join(copy, "docs/scaling.md"), "utf8")
    expect(written).toContain("Computed from `bench/results/2026-11-29T00-00-00-000Z.json`")
    expect(written.slice(0, written.indexOf(BEGIN))).toBe(page.slice(0, page.indexOf(BEGIN)))
    expect(written.slice(written.indexOf(END))).toBe(page.slice(page.indexOf(END)))
    expect(readFigures(JSON.parse(readFileSync(join(copy, "bench/capacity-figures.json"), "utf8")), "x")).toEqual({ ...figures(), source: "bench/results/2026-11-29T00-00-00-000Z.json" })
    expect(outputs[2]).toContain("| Authors | 100,000 |")
  })
})

describe("bench/capacity.ts: its assumptions are the code's", () => {
  it("id shards, an entry's overhead, the read cache's defaults, the pool, the pod's CPU limit", () => {
    expect(DEFAULTS.idShards).toBe(ID_SHARDS)
    // `GET /authors?id=` is a list read: its answer `[{"id":…,"name":…,"created_at":…}]` (~85 B), its key two bytes a character.
    expect(DEFAULTS.idEntryBytes - 85 - 2 * listKey({ id: 1_000_000 }).length).toBe(ENTRY_OVERHEAD_BYTES)
    const config = readFileSync(join(ROOT, "src/Config.ts"), "utf8")
    const setting = (name: string) => Number(new RegExp(`"${name}", ([\\d_]+)\\)`).exec(config)?.[1]?.replaceAll("_", ""))
    expect(setting("READ_CACHE_MAX_BYTES")).toBe(DEFAULTS.cacheBytes)
    expect(setting("READ_CACHE_MAX_AGE_SECONDS")).toBe(DEFAULTS.maxAgeSeconds)
    expect(setting("DATABASE_POOL_MAX") + 1).toBe(DEFAULTS.connectionsPerInstance)
    const deployment = readFileSync(join(ROOT, "deploy/kubernetes/base/deployment.yaml"), "utf8")
    expect(/limits:\s*\n\s*cpu: "?([\d.]+)"?/.exec(deployment)?.[1]).toBe(String(DEFAULTS.instanceCores))
  })
})
