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
import { type Backends, ROOT, startService } from "./servers.js"
import { type BenchKey, installServiceKey } from "./tokens.js"

export interface Prepared {
  readonly serviceDataDir: string
  readonly baselineDataDir: string
  readonly service: Backends
  readonly baseline: Backends
  readonly timings: Record<string, number>
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
    const child = spawn(process.execPath, ["--import", "tsx", "bench/seed.ts", ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] })
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
    return { serviceDataDir, baselineDataDir, service, baseline, timings, dispose }
  } catch (error) {
    await dispose()
    throw error
  }
}
