/**
 * Each server's own fresh database, seeded identically:
 * - real PostgreSQL (BENCH_DATABASE_URL): `CREATE DATABASE` on that server for the service; the
 *   service migrates it at its first start; it is seeded; the baseline's database is then created
 *   as a copy (`CREATE DATABASE … TEMPLATE`), so both start from the same rows and the same layout.
 * - embedded PGlite: the service migrates `$DATA_DIR/pgdata` at its first start and is stopped;
 *   the directory is seeded with PGlite directly (a child process, bench/seed.ts), then copied to
 *   the baseline's data directory, which the baseline opens with its own PGlite.
 * Seeding 1,000,000 audit rows takes ~75 s on PGlite here, so it is done once and copied.
 */
import { spawn } from "node:child_process"
import { cpSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { type Backends, ROOT, startService } from "./servers.ts"
import { type BenchKey, installServiceKey } from "./tokens.ts"

export interface Prepared {
  readonly serviceDataDir: string
  readonly baselineDataDir: string
  readonly service: Backends
  readonly baseline: Backends
  readonly timings: Record<string, number>
  /**
   * Waits until no statement runs on either bench database (ms waited). A round must not pay for
   * the last one's leftovers: when autocannon stops, the requests still queued in a server's pool
   * run on — at 1,000,000 authors, the last-page-by-offset round left seconds of PostgreSQL work
   * that the next round (by cursor) then measured. Watching the server's own CPU (`settle`) does
   * not see it: the server is idle, waiting for the database. With PGlite the database runs inside
   * the server, so `settle` covers it.
   */
  readonly quiet: () => Promise<number>
  readonly dispose: () => Promise<void>
}

const withClient = async <A>(url: string, f: (client: pg.Client) => Promise<A>) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

const databaseUrl = (adminUrl: string, name: string) => {
  const u = new URL(adminUrl)
  u.pathname = `/${name}`
  return u.toString()
}

const runSeed = (args: ReadonlyArray<string>) =>
  new Promise<Record<string, number>>((resolve, reject) => {
    const child = spawn(process.execPath, ["bench/seed.ts", ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    let err = ""
    child.stdout.on("data", (d: Buffer) => (out += d.toString()))
    child.stderr.on("data", (d: Buffer) => (err += d.toString()))
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`seeding failed (${code}): ${err.slice(-1000)}`))
      try {
        resolve(JSON.parse(out.trim().split("\n").pop() ?? "{}") as Record<string, number>)
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)))
      }
    })
  })

export interface PrepareOptions {
  readonly adminUrl: string | undefined
  readonly redisUrl: string | undefined
  readonly redisPrefix: string
  readonly authors: number
  readonly auditRows: number
  readonly anchor: Date
  readonly key: BenchKey
  readonly log: (line: string) => void
}

/** Polls `pg_stat_activity` until three polls in a row (100 ms apart) see no active statement on `databases`. */
const databasesQuiet = (adminUrl: string, databases: ReadonlyArray<string>) => (maxMs = 30_000) =>
  withClient(adminUrl, async (c) => {
    const start = Date.now()
    let quietPolls = 0
    while (quietPolls < 3 && Date.now() - start < maxMs) {
      const { rows } = await c.query<{ active: number }>(
        "SELECT count(*)::int AS active FROM pg_stat_activity WHERE datname = ANY($1) AND state = 'active' AND pid <> pg_backend_pid()",
        [databases]
      )
      quietPolls = rows[0]!.active === 0 ? quietPolls + 1 : 0
      if (quietPolls < 3) await new Promise((r) => setTimeout(r, 100))
    }
    return Date.now() - start
  })

export const prepareDatabases = async (o: PrepareOptions): Promise<Prepared> => {
  const serviceDataDir = mkdtempSync(join(tmpdir(), "ads-bench-service-"))
  const baselineDataDir = mkdtempSync(join(tmpdir(), "ads-bench-baseline-"))
  installServiceKey(serviceDataDir, o.key)
  const suffix = `${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 7)}`
  const names = { service: `ads_bench_svc_${suffix}`, baseline: `ads_bench_base_${suffix}` }
  const created: Array<string> = []
  const dispose = async () => {
    if (o.adminUrl !== undefined && created.length > 0) {
      await withClient(o.adminUrl, async (c) => {
        for (const name of created) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      }).catch((error: unknown) => o.log(`could not drop bench databases: ${String(error)}`))
    }
    rmSync(serviceDataDir, { recursive: true, force: true })
    rmSync(baselineDataDir, { recursive: true, force: true })
  }
  try {
    const timings: Record<string, number> = {}
    const t = () => performance.now()
    const serviceDbUrl = o.adminUrl === undefined ? undefined : databaseUrl(o.adminUrl, names.service)
    const baselineDbUrl = o.adminUrl === undefined ? undefined : databaseUrl(o.adminUrl, names.baseline)
    if (o.adminUrl !== undefined) {
      await withClient(o.adminUrl, (c) => c.query(`CREATE DATABASE ${names.service}`))
      created.push(names.service)
    }
    const service: Backends = { databaseUrl: serviceDbUrl, redisUrl: o.redisUrl, redisPrefix: o.redisPrefix }
    const baseline: Backends = { databaseUrl: baselineDbUrl, redisUrl: o.redisUrl, redisPrefix: o.redisPrefix }

    let t0 = t()
    o.log("migrating: first start of the service")
    const first = await startService(serviceDataDir, service)
    await first.stop()
    timings["service_first_start_s"] = (t() - t0) / 1000

    t0 = t()
    o.log(`seeding ${o.authors} authors and ${o.auditRows} audit records (${o.adminUrl === undefined ? "PGlite" : "PostgreSQL"})`)
    const target = serviceDbUrl !== undefined ? ["--url", serviceDbUrl] : ["--pglite", join(serviceDataDir, "pgdata")]
    const seeded = await runSeed([...target, "--authors", String(o.authors), "--audit", String(o.auditRows), "--anchor", o.anchor.toISOString()])
    for (const [k, v] of Object.entries(seeded)) timings[`seed_${k}`] = v
    timings["seed_total_s"] = (t() - t0) / 1000

    t0 = t()
    if (o.adminUrl !== undefined) {
      await withClient(o.adminUrl, (c) => c.query(`CREATE DATABASE ${names.baseline} TEMPLATE ${names.service}`))
      created.push(names.baseline)
    } else {
      cpSync(join(serviceDataDir, "pgdata"), join(baselineDataDir, "pgdata"), { recursive: true })
    }
    timings["copy_s"] = (t() - t0) / 1000
    const quiet = o.adminUrl === undefined ? () => Promise.resolve(0) : databasesQuiet(o.adminUrl, [names.service, names.baseline])
    return { serviceDataDir, baselineDataDir, service, baseline, timings, quiet, dispose }
  } catch (error) {
    await dispose()
    throw error
  }
}
