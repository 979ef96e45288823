/**
 * `npm run bench`: the service against an independently written baseline (bench/baseline/server.ts,
 * its own schema and SQL), each on its own fresh database seeded with the same rows, workload by
 * workload in alternating rounds (service, baseline, service, baseline, …). See bench/README.md.
 *
 *   npm run bench -- [--rounds 5] [--duration 5] [--warmup 2] [--only W1,W2,W2b,W6,W9,W10,W7,idle] [--authors 10000]
 *                    [--audit-rows 1000000] [--fanout-clients 2000] [--fanout-events 30]
 *                    [--idle-connections 5000] [--users 64]
 *
 * BENCH_DATABASE_URL / BENCH_REDIS_URL select real PostgreSQL / Redis (else embedded PGlite and
 * in-process stores); BENCH_REDIS_CLUSTER_NODES (with BENCH_REDIS_URL) puts the service on a Redis
 * Cluster, the baseline staying on BENCH_REDIS_URL. Results: printed tables and
 * bench/results/<timestamp>.json.
 */
import { Redis } from "ioredis"
import { randomBytes } from "node:crypto"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, totalmem } from "node:os"
import { join } from "node:path"
import { prepareDatabases, type Prepared } from "./lib/databases.ts"
import { type FanoutResult, type IdleResult, measureFanout, measureIdle } from "./lib/fanout.ts"
import { closeClients, openClients, type RoundResult, runHttp, runWsRoundTrips } from "./lib/load.ts"
import { type PgCpu, pgCpu, pgDelta, type RedisCpu, redisCpu } from "./lib/cpu.ts"
import { countersDelta, scrapeMetrics } from "./lib/metrics.ts"
import { checkAnswers, checkWsAnswers, paritySamples } from "./lib/parity.ts"
import { formatNumber as fmt, formatWorkload, type MeasuredRound, ratio, round2, type ServerSummary, summarize } from "./lib/report.ts"
import { cpuTicks, heapSnapshot, HEAP_SNAPSHOT_DIR, ROOT, rssMb, type Server, type ServerName, settle, startBaseline, startService, writeCalls } from "./lib/servers.ts"
import { makeKey, mintToken, mintTokens } from "./lib/tokens.ts"
import { type Context, w6Spec, type Workload, WORKLOADS } from "./lib/workloads.ts"

// ---- options ------------------------------------------------------------------------------------
const argv = process.argv.slice(2)
const option = (name: string): string | undefined => {
  const i = argv.indexOf(`--${name}`)
  if (i !== -1) return argv[i + 1]
  const inline = argv.find((a) => a.startsWith(`--${name}=`))
  return inline?.slice(name.length + 3)
}
const numberOption = (name: string, fallback: number) => {
  const raw = option(name)
  const n = raw === undefined ? fallback : Number(raw)
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a non-negative number`)
  return n
}
if (argv.includes("--help")) {
  process.stdout.write("usage: npm run bench -- [--rounds 5] [--duration 5] [--warmup 2] [--only W1,W2,W2b,W4,W6,W9,W10,W7,idle] [--authors 10000] [--audit-rows 1000000]\n" +
    "                     [--fanout-clients 2000] [--fanout-events 30] [--idle-connections 5000] [--users 64]\n")
  process.exit(0)
}
const opts = {
  rounds: Math.max(1, numberOption("rounds", 5)),
  duration: numberOption("duration", 5),
  warmup: numberOption("warmup", 2),
  authors: Math.max(100, numberOption("authors", 10_000)),
  auditRows: numberOption("audit-rows", 1_000_000),
  fanoutClients: numberOption("fanout-clients", 2000),
  fanoutEvents: Math.max(1, numberOption("fanout-events", 30)),
  idleConnections: numberOption("idle-connections", 5000),
  users: Math.max(1, numberOption("users", 64)),
  only: option("only")?.split(",").map((s) => s.trim()).filter((s) => s !== "")
}
const selected = (id: string) => opts.only === undefined || opts.only.some((o) => o.toLowerCase() === id.toLowerCase() || id.toLowerCase().startsWith(`${o.toLowerCase()}-`))
const adminUrl = process.env["BENCH_DATABASE_URL"] || undefined
const redisUrl = process.env["BENCH_REDIS_URL"] || undefined
const redisClusterNodes = process.env["BENCH_REDIS_CLUSTER_NODES"] || undefined
if (redisClusterNodes !== undefined && redisUrl === undefined) throw new Error("BENCH_REDIS_CLUSTER_NODES needs BENCH_REDIS_URL too (the baseline's Redis)")
/** Every Redis server the run uses: the one server, and the cluster's nodes. */
const redisServers = [...(redisUrl === undefined ? [] : [redisUrl]), ...(redisClusterNodes?.split(",").map((node) => `redis://${node.trim()}`) ?? [])]
const redisDescription = redisUrl === undefined
  ? "in-process stores"
  : redisClusterNodes === undefined
  ? "Redis (BENCH_REDIS_URL)"
  : "the service on a Redis Cluster (BENCH_REDIS_CLUSTER_NODES), the baseline on BENCH_REDIS_URL"

const started = performance.now()
const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0).padStart(4)} s`
const log = (line: string) => process.stdout.write(`[${elapsed()}] ${line}\n`)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const message = (error: unknown) => (error instanceof Error ? error.message : String(error)).split("\n")[0]!.slice(0, 300)

// ---- cleanup ------------------------------------------------------------------------------------
const runId = randomBytes(4).toString("hex")
const redisPrefix = `adsbench:${runId}:`
const servers: Array<Server> = []
let prepared: Prepared | undefined
let pgMeter: PgCpu | undefined
let redisMeter: RedisCpu | undefined

/** The bench database a server uses on BENCH_DATABASE_URL's server (its backends' CPU is attributed to it). */
const databaseOf = (name: ServerName) => prepared?.databaseNames?.[name]

/** Before a round: the database has finished the last round's statements, then the server is idle. */
const ready = async (pid: number) => (await prepared!.quiet()) + (await settle(pid))
let cleaning: Promise<void> | undefined
const cleanup = () =>
  cleaning ??= (async () => {
    for (const s of servers) await s.stop().catch(() => undefined)
    await prepared?.dispose().catch(() => undefined)
    redisMeter?.close()
    // Each server on its own (a cluster's replicas answer READONLY to UNLINK: skipped).
    for (const url of redisServers) {
      const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
      redis.on("error", () => {})
      try {
        await redis.connect()
        let cursor = "0"
        do {
          const [next, keys] = await redis.scan(cursor, "MATCH", `${redisPrefix}*`, "COUNT", 1000)
          cursor = next
          for (const key of keys) await redis.unlink(key)
        } while (cursor !== "0")
      } catch {
        // best effort
      } finally {
        redis.disconnect()
      }
    }
  })()
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping servers and removing the bench databases`)
    void cleanup().finally(() => process.exit(130))
  })
}

// ---- one workload -------------------------------------------------------------------------------
interface WorkloadResult {
  readonly id: string
  readonly title: string
  readonly connections: number
  readonly writes: ReadonlyArray<string>
  readonly service: ServerSummary
  readonly baseline: ServerSummary
  readonly ratio: number | undefined
}

const runWorkload = async (w: Workload, ctx: Context, pair: ReadonlyArray<Server>): Promise<WorkloadResult> => {
  /** A run of the load for `seconds`, and the unmeasured work it needs first (W10's authors to delete). */
  interface Runner { readonly run: (seconds: number) => Promise<RoundResult>; readonly prepare: (seconds: number) => Promise<void> }
  const state = new Map<ServerName, { runner?: Runner; failure?: string; rounds: Array<MeasuredRound> }>()
  for (const s of pair) state.set(s.name, { rounds: [] })
  const makeRunner = async (s: Server): Promise<Runner> => {
    if (w.kind === "http") {
      const spec = await w.spec(ctx, s)
      const prepare = async (seconds: number) => {
        const line = await spec.prepare?.(seconds)
        if (line !== undefined) log(`  ${w.id} ${s.name}: ${line}`)
      }
      return { run: (seconds) => runHttp(s.url, spec, seconds), prepare }
    }
    const request = w.request(ctx)
    return {
      prepare: () => Promise.resolve(),
      run: async (seconds) => {
        const clients = await openClients(s.wsUrl, ctx.tokens, w.connections, 64)
        try {
          return await runWsRoundTrips(clients, request, seconds)
        } finally {
          await closeClients(clients)
        }
      }
    }
  }
  const attempt = async (s: Server, f: (st: { runner?: Runner; rounds: Array<MeasuredRound> }) => Promise<void>) => {
    const st = state.get(s.name)!
    if (st.failure !== undefined) return
    if (!s.alive()) {
      st.failure = s.exitReason() ?? "server is gone"
      return
    }
    try {
      await f(st)
    } catch (error) {
      st.failure = s.alive() ? message(error) : s.exitReason() ?? message(error)
    }
  }
  for (const s of pair) {
    await attempt(s, async (st) => {
      st.runner = await makeRunner(s)
      if (opts.warmup > 0) {
        await st.runner.prepare(opts.warmup)
        await ready(s.pid)
        await st.runner.run(opts.warmup)
      }
    })
  }
  for (let r = 0; r < opts.rounds; r++) {
    for (const s of pair) {
      await attempt(s, async (st) => {
        await st.runner!.prepare(opts.duration)
        const settle_ms = await ready(s.pid)
        // The service's own counters (read cache, statements, batch sizes); the baseline has no /metrics.
        const metricsBefore = s.name === "service" ? await scrapeMetrics(s.url) : undefined
        const redisBefore = await redisMeter?.sample()
        const database = databaseOf(s.name)
        const pgBefore = pgMeter?.sample()
        const stopWatching = database === undefined ? undefined : pgMeter?.watch(database)
        const ticksBefore = cpuTicks(s.pid)
        const writesBefore = writeCalls(s.pid)
        const result = await st.runner!.run(opts.duration)
        const ticksAfter = cpuTicks(s.pid)
        const writesAfter = writeCalls(s.pid)
        const watched = stopWatching?.()
        const pgAfter = pgMeter?.sample()
        const redisAfter = await redisMeter?.sample()
        const metricsAfter = metricsBefore === undefined ? undefined : await scrapeMetrics(s.url)
        const counters = metricsBefore !== undefined && metricsAfter !== undefined ? countersDelta(metricsBefore, metricsAfter) : undefined
        if (!s.alive()) throw new Error(s.exitReason() ?? "server is gone") // a round against a dead server is not a data point
        // CPU time (1 tick = 10 ms) per answered request, of the server and of the database and
        // Redis (only this server was under load): what other processes sharing the cores do to
        // the req/s figure leaves these alone.
        const answered = result.ok + result.errors
        const cpu_us_per_request = ticksBefore !== undefined && ticksAfter !== undefined && answered > 0
          ? (ticksAfter - ticksBefore) * 10_000 / answered
          : undefined
        const pg = pgDelta(pgBefore, pgAfter, database, watched, answered)
        const redis_us_per_request = redisBefore !== undefined && redisAfter !== undefined && answered > 0
          ? (redisAfter - redisBefore) * 1_000_000 / answered
          : undefined
        // Socket writes are a large share of a short request's CPU: their count per request says how many each costs.
        const writes_per_request = writesBefore !== undefined && writesAfter !== undefined && answered > 0
          ? (writesAfter - writesBefore) / answered
          : undefined
        st.rounds.push({ ...result, settle_ms, cpu_us_per_request, writes_per_request, pg_us_per_request: pg.cluster, pg_backends_us_per_request: pg.backends, redis_us_per_request, counters })
        const us = (n: number | undefined) => (n === undefined ? "–" : fmt(n))
        log(`  ${w.id} round ${r + 1}/${opts.rounds} ${s.name.padEnd(8)} ${fmt(result.rps).padStart(7)} req/s  p50 ${fmt(result.p50, 2)} ms  p99 ${fmt(result.p99, 2)} ms  errors ${result.errors}` +
          `  CPU µs/request: server ${us(cpu_us_per_request)}` +
          (writes_per_request === undefined ? "" : ` (${writes_per_request.toFixed(2)} writes)`) +
          (pgMeter === undefined ? "" : `, PostgreSQL ${us(pg.cluster)} (own db ${us(pg.backends)})`) +
          (redisMeter === undefined ? "" : `, Redis ${us(redis_us_per_request)}`) +
          (counters === undefined || answered === 0 ? "" : `; per request: cache ${(counters.cache_hits / answered).toFixed(2)} hits, ${(counters.cache_misses / answered).toFixed(2)} misses, ${(counters.statements / answered).toFixed(2)} statements`))
      })
    }
  }
  const summaryOf = (s: Server) => {
    const st = state.get(s.name)!
    return summarize(st.rounds, st.failure, rssMb(s.pid))
  }
  const service = summaryOf(pair[0]!)
  const baseline = summaryOf(pair[1]!)
  return { id: w.id, title: w.title, connections: w.connections, writes: w.writes ?? [], service, baseline, ratio: ratio(service, baseline) }
}

// ---- main ---------------------------------------------------------------------------------------
const main = async () => {
  log(`bench ${runId}: ${opts.authors} authors, ${opts.auditRows} audit records, ${opts.rounds} rounds × ${opts.duration} s (+${opts.warmup} s warm-up), ` +
    `database ${adminUrl === undefined ? "embedded PGlite" : "PostgreSQL (BENCH_DATABASE_URL)"}, ${redisDescription}`)
  const key = await makeKey()
  const tokens = await mintTokens(key, opts.users)
  const reader = await mintToken(key, "bench-reader", ["get-authors"])
  const anchor = new Date()
  prepared = await prepareDatabases({ adminUrl, redisUrl, redisClusterNodes, redisPrefix, authors: opts.authors, auditRows: opts.auditRows, anchor, key, log })
  log(`databases ready, same rows in both (${JSON.stringify(prepared.fingerprint)}): ${JSON.stringify(prepared.timings)}`)
  const jwkFile = prepared.jwkFile
  if (adminUrl !== undefined && prepared.databaseNames !== undefined) {
    pgMeter = await pgCpu(adminUrl, [prepared.databaseNames.service, prepared.databaseNames.baseline]).catch(() => undefined)
    if (pgMeter === undefined) log("PostgreSQL's processes are not visible in /proc (a remote server?): no PostgreSQL CPU figures")
  }
  if (redisServers.length > 0) redisMeter = redisCpu(redisServers)

  const service = await startService(prepared.serviceDataDir, prepared.service)
  servers.push(service)
  const baseline = await startBaseline(prepared.baselineDataDir, prepared.baseline, jwkFile)
  servers.push(baseline)
  log(`service pid ${service.pid} (${rssMb(service.pid)} MB), baseline pid ${baseline.pid} (${rssMb(baseline.pid)} MB)`)
  const pair: [Server, Server] = [service, baseline]
  /** A server that died (e.g. signalled from outside the runner) is restarted before the next workload, on the same data. */
  const restarts: Array<{ server: ServerName; at_s: number; reason: string }> = []
  const ensureAlive = async () => {
    for (const [i, s] of pair.entries()) {
      if (s.alive()) continue
      const reason = s.exitReason() ?? "gone"
      log(`${s.name} is not running (${reason}); restarting it on the same data`)
      restarts.push({ server: s.name, at_s: round2((performance.now() - started) / 1000), reason })
      try {
        const next = s.name === "service"
          ? await startService(prepared!.serviceDataDir, prepared!.service)
          : await startBaseline(prepared!.baselineDataDir, prepared!.baseline, jwkFile)
        servers.push(next)
        pair[i] = next
      } catch (error) {
        log(`restart of ${s.name} failed: ${message(error)}`)
      }
    }
  }

  const ctx: Context = { tokens, authors: opts.authors, anchor, runId }
  const answers = await checkAnswers(service, baseline, { bench: tokens[0]!, reader }, paritySamples(opts.authors, anchor, runId))
  const wsAnswers = await checkWsAnswers(service, baseline, tokens[0]!)
  const parity = [...answers.problems, ...wsAnswers.problems]
  for (const p of parity) log(`parity: ${p}`)
  const paritySummary = `${parity.length === 0 ? "identical answers" : `${parity.length} difference(s)`} on ${answers.compared} HTTP and ${wsAnswers.compared} WebSocket sample requests ` +
    "(successes: status and body, next_cursor as present/null since each server's cursor is its own; errors: status only, so 422 bodies may differ)"
  log(`parity: ${paritySummary}`)

  const workloads: Array<WorkloadResult> = []
  for (const w of WORKLOADS.filter((w) => selected(w.id))) {
    await ensureAlive()
    log(`${w.id}: ${w.title}`)
    workloads.push(await runWorkload(w, ctx, pair))
  }

  let fanout: Record<string, FanoutResult | { failed: string }> | undefined
  if (selected("W7") && opts.fanoutClients > 0) {
    fanout = {}
    await ensureAlive()
    for (const s of pair) {
      log(`W7: broadcast fan-out to ${opts.fanoutClients} clients, ${s.name}`)
      try {
        if (!s.alive()) throw new Error(s.exitReason())
        await ready(s.pid)
        fanout[s.name] = await measureFanout(s, tokens, opts.fanoutClients, opts.fanoutEvents)
      } catch (error) {
        fanout[s.name] = { failed: s.alive() ? message(error) : s.exitReason() ?? message(error) }
      }
      await sleep(1000)
    }
  }

  let idle: Record<string, IdleResult | { failed: string }> | undefined
  if (selected("idle") && opts.idleConnections > 0) {
    idle = {}
    await ensureAlive()
    for (const s of pair) {
      log(`idle: ${opts.idleConnections} WebSocket connections, ${s.name}`)
      try {
        if (!s.alive()) throw new Error(s.exitReason())
        idle[s.name] = await measureIdle(s, tokens, opts.idleConnections, w6Spec(ctx), opts.duration)
      } catch (error) {
        idle[s.name] = { failed: s.alive() ? message(error) : s.exitReason() ?? message(error) }
      }
      await sleep(1000)
    }
  }

  // Resident memory once every workload is done, before any heap snapshot (bench/README.md#reading-the-table).
  const endRss = { service: rssMb(pair[0].pid), baseline: rssMb(pair[1].pid) }
  const endRssRatio = endRss.service !== undefined && endRss.baseline !== undefined && endRss.baseline > 0 ? endRss.service / endRss.baseline : undefined
  if (HEAP_SNAPSHOT_DIR !== undefined) {
    for (const s of pair) {
      if (!s.alive()) continue
      log(`heap snapshot of ${s.name} (RSS ${rssMb(s.pid)} MB): ${(await heapSnapshot(s).catch((error: unknown) => message(error))) ?? "not written in time"}`)
    }
  }

  // ---- report -----------------------------------------------------------------------------------
  const detail = (w: WorkloadResult) => `${w.connections} connections, ${opts.rounds} × ${opts.duration} s`
  const out: Array<string> = ["", "=".repeat(100)]
  out.push(`Author Directory Service vs baseline — ${opts.authors.toLocaleString("en-US")} authors, ${opts.auditRows.toLocaleString("en-US")} seeded audit records, ` +
    `${adminUrl === undefined ? "embedded PGlite (in each server process)" : "PostgreSQL"}, ${redisUrl === undefined ? "in-process stores" : redisClusterNodes === undefined ? "Redis" : "Redis Cluster (service), Redis (baseline)"}`)
  out.push(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? "?"}), ${Math.round(totalmem() / 2 ** 30)} GB, node ${process.version}; servers, database, Redis and the load generator share these cores`)
  out.push("")
  for (const w of workloads) out.push(formatWorkload(w.id, w.title, detail(w), w.service, w.baseline, adminUrl === undefined ? "in-server" : "postgres", redisUrl !== undefined, w.writes), "")
  if (fanout !== undefined) {
    out.push(`W7  broadcast fan-out: POST /authors → all ${opts.fanoutClients} WebSocket clients have author.created  [${opts.fanoutEvents} events each]`)
    for (const name of ["service", "baseline"] as const) {
      const f = fanout[name]
      if (f === undefined) continue
      if ("failed" in f) {
        out.push(`  ${name.padEnd(9)} failed: ${f.failed}`)
        continue
      }
      const slowDropped = f.active_before_slow !== undefined && f.active_after_slow !== undefined
        ? (f.active_after_slow <= f.active_before_slow ? "slow client dropped" : "slow client still connected")
        : "slow client: connection count unknown"
      out.push(`  ${name.padEnd(9)} all delivered p50 ${fmt(f.normal.p50_ms, 1)} ms, p99 ${fmt(f.normal.p99_ms, 1)} ms (incomplete ${f.normal.incomplete}); ` +
        `with a non-reading client p50 ${fmt(f.with_slow_client.p50_ms, 1)} ms, p99 ${fmt(f.with_slow_client.p99_ms, 1)} ms (incomplete ${f.with_slow_client.incomplete}); ` +
        `${slowDropped}; connect ${fmt(f.connect_s, 1)} s; RSS ${fmt(f.rss_mb)} MB`)
    }
    out.push("")
  }
  if (idle !== undefined) {
    out.push(`Idle  ${opts.idleConnections} open WebSocket connections: RSS, and W6 latency with them open vs without  [${opts.duration} s each]`)
    for (const name of ["service", "baseline"] as const) {
      const r = idle[name]
      if (r === undefined) continue
      if ("failed" in r) {
        out.push(`  ${name.padEnd(9)} failed: ${r.failed}`)
        continue
      }
      const verdict = r.p99_ratio <= 2 && r.p50_ratio <= 2 ? "within 2×" : "NOT within 2×"
      out.push(`  ${name.padEnd(9)} RSS ${fmt(r.rss_before_mb)} → ${fmt(r.rss_with_mb)} MB (${r.kb_per_connection !== undefined && r.kb_per_connection > 0 ? `${fmt(r.kb_per_connection, 1)} KB/connection` : "no growth above GC noise"}); ` +
        `W6 p50 ${fmt(r.w6_idle.p50, 2)} → ${fmt(r.w6_with_connections.p50, 2)} ms, p99 ${fmt(r.w6_idle.p99, 2)} → ${fmt(r.w6_with_connections.p99, 2)} ms, ` +
        `req/s ${fmt(r.w6_idle.rps)} → ${fmt(r.w6_with_connections.rps)} (${verdict})`)
    }
    out.push("")
  }
  out.push(`End RSS  service ${fmt(endRss.service)} MB, baseline ${fmt(endRss.baseline)} MB: service/baseline ${endRssRatio === undefined ? "–" : `${endRssRatio.toFixed(2)}×`}` +
    " (VmRSS at the end of the run, after the last workload)", "")
  out.push(adminUrl === undefined
    ? "note: CPU µs per request of the server includes its embedded database (PGlite runs inside each server's process)."
    : pgMeter === undefined
    ? "note: no PostgreSQL CPU figures (the cluster's processes are not visible in /proc)."
    : "note: PostgreSQL CPU µs per request = all the cluster's processes over the round (other clients of the cluster count in it too); in brackets, only the backends of this server's database.")
  if (redisUrl !== undefined) {
    out.push(`note: Redis CPU µs per request = used_cpu_user + used_cpu_sys of INFO cpu over the round (${redisServers.length === 1 ? "the whole Redis server" : "every Redis server of the run: the one server and the cluster's nodes, replicas included"}).`)
    out.push("note: with Redis the service may also journal audit records in Redis for crash safety; the baseline buffers them in process only.")
  }
  for (const r of restarts) out.push(`note: ${r.server} was restarted at ${r.at_s} s after it stopped unexpectedly (${r.reason.slice(0, 120)}); its later numbers come from a fresh process`)
  out.push(`parity: ${paritySummary}${parity.length === 0 ? "" : `: ${parity.join("; ")}`}`)
  const totalSeconds = (performance.now() - started) / 1000
  out.push(`total wall time ${fmt(totalSeconds, 0)} s (setup ${JSON.stringify(prepared.timings)})`)
  process.stdout.write(`${out.join("\n")}\n`)

  const resultsDir = join(ROOT, "bench", "results")
  mkdirSync(resultsDir, { recursive: true })
  const file = join(resultsDir, `${new Date().toISOString().replace(/[:.]/g, "-")}.json`)
  writeFileSync(file, JSON.stringify({
    run_id: runId,
    started_at: new Date(Date.now() - totalSeconds * 1000).toISOString(),
    total_s: round2(totalSeconds),
    options: opts,
    backends: { database: adminUrl === undefined ? "pglite" : "postgres", redis: redisUrl === undefined ? "in-process" : redisClusterNodes === undefined ? "redis" : "redis-cluster" },
    machine: { cores: cpus().length, cpu: cpus()[0]?.model, memory_gb: Math.round(totalmem() / 2 ** 30), node: process.version },
    setup_timings_s: prepared.timings,
    seeded: prepared.fingerprint,
    cpu_measured: {
      server: "utime + stime of the server process (with PGlite: its embedded database too)",
      postgres: pgMeter === undefined ? null : "all processes of the cluster (postmaster, its children, reaped children); pg_backends_*: the backends of the server's own database",
      redis: redisMeter === undefined ? null : "INFO cpu used_cpu_user + used_cpu_sys"
    },
    parity: { summary: paritySummary, differences: parity },
    restarts,
    end_rss_mb: { ...endRss, ratio: endRssRatio === undefined ? undefined : round2(endRssRatio) },
    workloads,
    fanout,
    idle
  }, null, 2))
  log(`results written to ${file}`)
}

let exitCode = 0
try {
  await main()
} catch (error) {
  exitCode = 1
  process.stderr.write(`bench failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
} finally {
  await cleanup()
}
process.exit(exitCode)
