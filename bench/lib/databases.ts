/**
 * Each server's own fresh database, in its own schema, seeded with the same rows:
 * - real PostgreSQL (BENCH_DATABASE_URL): two new empty databases on that server;
 * - embedded PGlite: two fresh data directories (each server opens `$dir/pgdata` in its process).
 * The service starts once on its empty database and applies migrations/ itself, then is stopped;
 * the baseline starts once on its own and creates its schema itself (bench/baseline/schema.ts),
 * then is stopped. Both are then seeded by bench/seed.ts (two child processes, at once), from one
 * anchor time, and their fingerprints (every field the API shows of the seeded authors and
 * audit records) must be equal.
 *
 * A copy of one seeded database (`CREATE DATABASE … TEMPLATE`, a copied PGlite directory) no
 * longer fits: the two schemas differ, so each is seeded by the same deterministic statements.
 */
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { isDeepStrictEqual } from "node:util"
import pg from "pg"
import { type Backends, ROOT, type Server, startBaseline, startService } from "./servers.ts"
import { type BenchKey, installServiceKey, writePublicKey } from "./tokens.ts"

export interface Prepared {
  readonly serviceDataDir: string
  readonly baselineDataDir: string
  readonly service: Backends
  readonly baseline: Backends
  /** The baseline's public key file (it verifies the service's tokens). */
  readonly jwkFile: string
  /** The databases' names on BENCH_DATABASE_URL's server (undefined with PGlite). */
  readonly databaseNames: { readonly service: string; readonly baseline: string } | undefined
  readonly timings: Record<string, number>
  /** What both seeds reported: row counts and hashes of the seeded rows (equal, or preparation failed). */
  readonly fingerprint: Record<string, unknown>
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

export const withClient = async <A>(url: string, f: (client: pg.Client) => Promise<A>) => {
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

interface SeedReport { readonly authors_s: number; readonly audit_s: number; readonly vacuum_s: number; readonly fingerprint_s: number; readonly fingerprint: Record<string, unknown> }

const runSeed = (args: ReadonlyArray<string>) =>
  new Promise<SeedReport>((resolve, reject) => {
    const child = spawn(process.execPath, ["bench/seed.ts", ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    let err = ""
    child.stdout.on("data", (d: Buffer) => (out += d.toString()))
    child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)))
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`seeding failed (${code}): ${err.slice(-1000)}`))
      try {
        resolve(JSON.parse(out.trim().split("\n").pop() ?? "{}") as SeedReport)
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)))
      }
    })
  })

export interface PrepareOptions {
  readonly adminUrl: string | undefined
  readonly redisUrl: string | undefined
  /** The service's Redis Cluster, if any (the baseline stays on `redisUrl`). */
  readonly redisClusterNodes?: string | undefined
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

/** Starts a server on its empty database so it creates its schema, then stops it. */
const firstStart = async (start: () => Promise<Server>) => {
  const server = await start()
  await server.stop()
}

export const prepareDatabases = async (o: PrepareOptions): Promise<Prepared> => {
  const serviceDataDir = mkdtempSync(join(tmpdir(), "ads-bench-service-"))
  const baselineDataDir = mkdtempSync(join(tmpdir(), "ads-bench-baseline-"))
  installServiceKey(serviceDataDir, o.key)
  const jwkFile = join(baselineDataDir, "public-jwk.json")
  writePublicKey(jwkFile, o.key)
  const suffix = `${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 7)}`
  const names = o.adminUrl === undefined ? undefined : { service: `ads_bench_svc_${suffix}`, baseline: `ads_bench_base_${suffix}` }
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
    if (o.adminUrl !== undefined && names !== undefined) {
      await withClient(o.adminUrl, async (c) => {
        for (const name of [names.service, names.baseline]) {
          await c.query(`CREATE DATABASE ${name}`)
          created.push(name)
        }
      })
    }
    const urlOf = (name: string | undefined) => (o.adminUrl === undefined || name === undefined ? undefined : databaseUrl(o.adminUrl, name))
    const service: Backends = { databaseUrl: urlOf(names?.service), redisUrl: o.redisUrl, redisClusterNodes: o.redisClusterNodes, redisPrefix: o.redisPrefix }
    const baseline: Backends = { databaseUrl: urlOf(names?.baseline), redisUrl: o.redisUrl, redisPrefix: o.redisPrefix }

    let t0 = t()
    o.log("schemas: first start of the service (applies migrations/) and of the baseline (creates its own tables)")
    await firstStart(() => startService(serviceDataDir, service))
    timings["service_first_start_s"] = (t() - t0) / 1000
    t0 = t()
    await firstStart(() => startBaseline(baselineDataDir, baseline, jwkFile))
    timings["baseline_first_start_s"] = (t() - t0) / 1000

    t0 = t()
    o.log(`seeding ${o.authors} authors and ${o.auditRows} audit records into each database (${o.adminUrl === undefined ? "PGlite" : "PostgreSQL"}, both at once)`)
    const common = ["--authors", String(o.authors), "--audit", String(o.auditRows), "--anchor", o.anchor.toISOString()]
    const target = (b: Backends, dir: string) => (b.databaseUrl !== undefined ? ["--url", b.databaseUrl] : ["--pglite", join(dir, "pgdata")])
    const [svc, base] = await Promise.all([
      runSeed(["--schema", "service", ...target(service, serviceDataDir), ...common]),
      runSeed(["--schema", "baseline", ...target(baseline, baselineDataDir), ...common])
    ])
    for (const [name, r] of [["service", svc], ["baseline", base]] as const) {
      for (const k of ["authors_s", "audit_s", "vacuum_s", "fingerprint_s"] as const) timings[`seed_${name}_${k}`] = r[k]
    }
    timings["seed_total_s"] = (t() - t0) / 1000
    if (!isDeepStrictEqual(svc.fingerprint, base.fingerprint)) {
      throw new Error(`the seeded databases differ: service ${JSON.stringify(svc.fingerprint)} vs baseline ${JSON.stringify(base.fingerprint)}`)
    }
    const quiet = o.adminUrl === undefined || names === undefined ? () => Promise.resolve(0) : databasesQuiet(o.adminUrl, [names.service, names.baseline])
    return { serviceDataDir, baselineDataDir, service, baseline, jwkFile, databaseNames: names, timings, fingerprint: svc.fingerprint, quiet, dispose }
  } catch (error) {
    await dispose()
    throw error
  }
}
