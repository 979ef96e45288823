/**
 * Creates per second on the service's own schema, by names per statement: `--clients` sessions
 * (16, as `pgbench -c 16`) each sending, for `--duration` seconds, the one statement batched
 * creates use — one prepared text for any batch size:
 *
 *   INSERT INTO authors (name) SELECT n FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i
 *   ON CONFLICT (name) DO NOTHING RETURNING id, name, created_at
 *
 * with 1, 4 and 16 new unique names per statement, on a fresh database migrated with whatever
 * migrations/ holds when it runs (`npm run migrate`), each session named as the service's
 * (`application_name`, which its triggers look at). `pgbench` itself cannot bind a new `text[]` per
 * transaction without a second statement (its variables are numbers), so the sessions are `pg`
 * clients in this process, the statement prepared once per session as pgbench's `-M prepared` does;
 * the table is vacuumed before each batch size, as pgbench does. The database is dropped at the end.
 *
 *   node bench/pgbench-creates.ts [--url postgres://…] [--clients 16] [--duration 10] [--warmup 2] [--batches 1,4,16]
 *
 * `--url` (default BENCH_DATABASE_URL): a PostgreSQL server where a database may be created and
 * dropped. Prints a markdown table (bench/README.md#creates-by-the-statement-pgbench-creates).
 */
import { spawn } from "node:child_process"
import { readdirSync } from "node:fs"
import { join } from "node:path"
import pg from "pg"
import { APPLICATION_NAME } from "../src/Db/Database.ts"
import { pgCpu, pgDelta } from "./lib/cpu.ts"
import { withClient } from "./lib/databases.ts"
import { percentile } from "./lib/load.ts"
import { ROOT } from "./lib/servers.ts"

export const CREATE_BATCH = "INSERT INTO authors (name) SELECT n FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i " +
  "ON CONFLICT (name) DO NOTHING RETURNING id, name, created_at"

const argv = process.argv.slice(2)
const option = (name: string) => {
  const i = argv.indexOf(`--${name}`)
  return i === -1 ? undefined : argv[i + 1]
}
const positive = (name: string, fallback: number) => {
  const n = Number(option(name) ?? fallback)
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number`)
  return n
}
if (argv.includes("--help")) {
  process.stdout.write("usage: node bench/pgbench-creates.ts [--url postgres://…] [--clients 16] [--duration 10] [--warmup 2] [--batches 1,4,16]\n")
  process.exit(0)
}
const adminUrl = option("url") ?? process.env["BENCH_DATABASE_URL"]
if (adminUrl === undefined || adminUrl === "") {
  process.stderr.write("bench/pgbench-creates.ts needs a PostgreSQL server: --url postgres://… or BENCH_DATABASE_URL\n")
  process.exit(2)
}
const clients = Math.round(positive("clients", 16))
const duration = positive("duration", 10)
const warmup = Math.max(0, Number(option("warmup") ?? 2) || 0)
const batches = (option("batches") ?? "1,4,16").split(",").map((b) => Math.round(Number(b)))
if (batches.some((b) => !Number.isInteger(b) || b < 1)) throw new Error("--batches: positive integers, e.g. 1,4,16")

const database = `ads_pgbench_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 7)}`
const databaseUrl = (() => {
  const u = new URL(adminUrl)
  u.pathname = `/${database}`
  return u.toString()
})()
const log = (line: string) => process.stderr.write(`${line}\n`)

/** `npm run migrate` on the fresh database: the service's own migrations, as they are now. */
const migrate = () =>
  new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, ["src/migrate.ts"], {
      cwd: ROOT,
      env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", DATABASE_URL: databaseUrl, LOG_LEVEL: "warning" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-4000)))
    child.stderr.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-4000)))
    child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`npm run migrate failed (${code}): ${output}`))))
  })

interface Result {
  readonly batch: number
  readonly statements: number
  readonly rows: number
  readonly seconds: number
  readonly p50: number
  readonly p99: number
  /** CPU of this process (the clients), as a share of one core. */
  readonly clientCore: number
  /** PostgreSQL's CPU per row: the whole cluster, and the backends of this database (undefined: its processes are not in /proc). */
  readonly pgClusterUs: number | undefined
  readonly pgBackendsUs: number | undefined
}

/** Each session sends the statement with `batch` new names until `seconds` are over; one named prepared statement per session. */
const load = async (sessions: ReadonlyArray<pg.Client>, batch: number, seconds: number, tag: string) => {
  const latencies: Array<number> = []
  let statements = 0
  let rows = 0
  const until = performance.now() + seconds * 1000
  await Promise.all(sessions.map(async (session, c) => {
    let n = 0
    while (performance.now() < until) {
      const names = Array.from({ length: batch }, () => `Pgbench ${tag} ${c}-${n++}`)
      const t0 = performance.now()
      const result = await session.query({ name: "create_authors", text: CREATE_BATCH, values: [names] })
      latencies.push(performance.now() - t0)
      statements++
      rows += result.rowCount ?? 0
    }
  }))
  return { statements, rows, latencies: Float64Array.from(latencies).sort() }
}

const run = async (): Promise<ReadonlyArray<Result>> => {
  const meter = await pgCpu(adminUrl, [database])
  const sessions = await Promise.all(Array.from({ length: clients }, async () => {
    const session = new pg.Client({ connectionString: databaseUrl, application_name: APPLICATION_NAME })
    await session.connect()
    return session
  }))
  try {
    const results: Array<Result> = []
    for (const batch of batches) {
      await sessions[0]!.query("VACUUM ANALYZE authors")
      if (warmup > 0) await load(sessions, batch, warmup, `warm ${batch}`)
      const pgBefore = meter?.sample()
      const stopWatching = meter?.watch(database)
      const cpuBefore = process.cpuUsage()
      const started = performance.now()
      const r = await load(sessions, batch, duration, `b${batch}`)
      const seconds = (performance.now() - started) / 1000
      const cpu = process.cpuUsage(cpuBefore)
      const pg = pgDelta(pgBefore, meter?.sample(), database, stopWatching?.(), r.rows)
      if (r.rows !== r.statements * batch) throw new Error(`batch ${batch}: ${r.rows} rows for ${r.statements} statements (names must all be new)`)
      results.push({
        batch, statements: r.statements, rows: r.rows, seconds,
        p50: percentile(r.latencies, 50), p99: percentile(r.latencies, 99),
        clientCore: (cpu.user + cpu.system) / 1e6 / seconds,
        pgClusterUs: pg.cluster, pgBackendsUs: pg.backends
      })
      log(`batch ${batch}: ${Math.round(r.statements / seconds)} statements/s, ${Math.round(r.rows / seconds)} rows/s`)
    }
    return results
  } finally {
    await Promise.all(sessions.map((s) => s.end().catch(() => undefined)))
  }
}

let dropping: Promise<void> | undefined
const drop = () => (dropping ??= withClient(adminUrl, async (c) => void await c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)).catch((error: unknown) => {
  log(`could not drop ${database}: ${String(error)}`)
}))
process.once("SIGINT", () => void drop().finally(() => process.exit(130)))

let exitCode = 0
try {
  await withClient(adminUrl, async (c) => void await c.query(`CREATE DATABASE ${database}`))
  await migrate()
  const version = await withClient(databaseUrl, async (c) => (await c.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v)
  const migrations = readdirSync(join(ROOT, "migrations")).filter((f) => f.endsWith(".sql")).sort()
  log(`${database}: migrations ${migrations.join(", ")}; ${clients} clients, ${warmup} s warm-up + ${duration} s per batch size`)
  const results = await run()
  const n = (x: number | undefined, digits = 0) => (x === undefined ? "–" : x.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }))
  const out = [
    `Creates on the service's schema (PostgreSQL ${version}, migrations up to ${migrations.at(-1) ?? "none"}), ${clients} clients, ${duration} s each, one prepared statement:`,
    "",
    "| names per statement | statements/s | rows/s | p50 ms | p99 ms | PostgreSQL CPU µs per row (own backends) | this process, cores |",
    "|---|---|---|---|---|---|---|",
    ...results.map((r) =>
      `| ${r.batch} | ${n(r.statements / r.seconds)} | ${n(r.rows / r.seconds)} | ${n(r.p50, 2)} | ${n(r.p99, 2)} | ${n(r.pgClusterUs)} (${n(r.pgBackendsUs)}) | ${n(r.clientCore, 2)} |`)
  ]
  process.stdout.write(`${out.join("\n")}\n`)
} catch (error) {
  exitCode = 1
  process.stderr.write(`pgbench-creates failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
} finally {
  await drop()
}
process.exit(exitCode)
