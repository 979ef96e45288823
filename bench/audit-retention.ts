/**
 * Audit retention at scale (docs/audit.md#retention): does pruning a day's worth of a
 * 1,000,000-record audit table slow the requests served meanwhile?
 *
 * In a scratch database on BENCH_DATABASE_URL (or TEST_DATABASE_URL): seeds BENCH_AUDIT_ROWS
 * (1,000,000) records spread evenly over BENCH_AUDIT_DAYS (30) days, then, round after round,
 * starts the service (`node dist/main.js`, as `npm start` runs it) with AUDIT_RETENTION_DAYS one
 * day shorter than the records reach back (so its first run, 30 s after it starts, deletes one day:
 * ~33,000 records), and keeps a steady load on it the whole time: 16 connections, 90 %
 * `GET /audit-logs` (unfiltered pages, a user's records, an action over the last week) and 10 %
 * `POST /authors`. Every response is timed; those that ended while the service was pruning
 * (from the first record deleted to the last, seen by polling `audit_records_pruned_total`) are
 * compared with those of the 20 s before it and the 10 s after.
 *
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/audit-retention.ts
 *
 * Options (environment): BENCH_AUDIT_ROWS, BENCH_AUDIT_DAYS, BENCH_RETENTION_ROUNDS (3).
 */
import autocannon from "autocannon"
import { Effect, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { Database } from "../src/Db/Database.ts"
import { AUDIT_SEED, scratchDatabase } from "./lib/audit.ts"
import { percentile, Samples } from "./lib/load.ts"
import { type Server, startService } from "./lib/servers.ts"
import { installServiceKey, makeKey, mintTokens } from "./lib/tokens.ts"

const ROWS = Number(process.env["BENCH_AUDIT_ROWS"] ?? 1_000_000)
const DAYS = Number(process.env["BENCH_AUDIT_DAYS"] ?? 30)
const ROUNDS = Number(process.env["BENCH_RETENTION_ROUNDS"] ?? 3)
const CONNECTIONS = 16
/** The service's first run comes 30 s after its layers are built (src/AuditLogs/Retention.ts). */
const BEFORE_MS = 20_000
const AFTER_MS = 10_000

const { adminUrl, name: dbName, url: dbUrl } = scratchDatabase("retention_bench")

interface Timed {
  readonly at: number
  readonly ms: number
  readonly kind: "read" | "create"
}

/** The steady load: every response with when it ended and how long it took. */
const startLoad = (server: Server, tokens: ReadonlyArray<string>) => {
  const responses: Array<Timed> = []
  const failures: Record<string, number> = {}
  let next = 0
  const week = new Date(Date.now() - 7 * 86_400_000).toISOString()
  let finished: () => void = () => {}
  const done = new Promise<void>((resolve) => {
    finished = resolve
  })
  const instance = autocannon({
    url: server.url,
    connections: CONNECTIONS,
    duration: 3600,
    timeout: 10,
    requests: [{
      setupRequest: (request) => {
        const n = next++
        const token = tokens[n % tokens.length]!
        const headers = { ...request.headers, authorization: `Bearer ${token}` }
        if (n % 10 === 9) {
          return { ...request, method: "POST", path: "/authors", headers: { ...headers, "content-type": "application/json" }, body: JSON.stringify({ name: `retention-${randomUUID()}` }) }
        }
        const path = n % 3 === 0
          ? `/audit-logs?page=${1 + (n % 5)}&per_page=20`
          : n % 3 === 1
          ? `/audit-logs?user_id=user-${n % 10000}&per_page=20`
          : `/audit-logs?action_type=POST&start_date=${week}&per_page=20`
        return { ...request, method: "GET", path, headers }
      }
    }]
  }, () => finished())
  // Each response is classified by its status (201: a create).
  instance.on("response", (_client: unknown, status: number, _bytes: number, responseTime: number) => {
    if (status === 200 || status === 201) responses.push({ at: performance.now(), ms: responseTime, kind: status === 201 ? "create" : "read" })
    else failures[String(status)] = (failures[String(status)] ?? 0) + 1
  })
  return {
    responses,
    failures,
    stop: () => {
      instance.stop()
      return done
    }
  }
}

/** The responses of each kind that ended in [from, to). */
const window = (responses: ReadonlyArray<Timed>, from: number, to: number) => ({
  seconds: (to - from) / 1000,
  read: responses.filter((r) => r.kind === "read" && r.at >= from && r.at < to).map((r) => r.ms),
  create: responses.filter((r) => r.kind === "create" && r.at >= from && r.at < to).map((r) => r.ms)
})
type Window = ReturnType<typeof window>

const line = (w: Window) =>
  (["read", "create"] as const).map((kind) => {
    const samples = new Samples()
    for (const ms of w[kind]) samples.push(ms)
    const sorted = samples.sorted()
    return `${kind} ${(sorted.length / w.seconds).toFixed(0).padStart(4)}/s p50 ${percentile(sorted, 50).toFixed(1).padStart(5)} ms ` +
      `p99 ${percentile(sorted, 99).toFixed(1).padStart(6)} ms`
  }).join(", ")

const pooled = (ws: ReadonlyArray<Window>): Window => ({
  seconds: ws.reduce((t, w) => t + w.seconds, 0),
  read: ws.flatMap((w) => w.read),
  create: ws.flatMap((w) => w.create)
})

const pruned = async (server: Server) => {
  const text = await (await fetch(`${server.url}/metrics`)).text()
  return Number(/^audit_records_pruned_total (\S+)$/m.exec(text)?.[1] ?? "NaN")
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const main = async () => {
  console.log(`conditions: ${new Date().toISOString()}, load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}, ` +
    `${ROWS} records over ${DAYS} days, ${CONNECTIONS} connections`)
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${dbName}`)
  const dataDir = mkdtempSync(join(tmpdir(), "retention-bench-"))
  try {
    await Effect.runPromise(Effect.scoped(Effect.asVoid(Effect.provide(Effect.void, Database.layer(Redacted.make(dbUrl), 2)))))
    const db = new pg.Client({ connectionString: dbUrl })
    await db.connect()
    const seedStart = performance.now()
    await db.query(AUDIT_SEED, [ROWS, DAYS])
    await db.query("VACUUM ANALYZE audit_logs")
    await db.query("VACUUM ANALYZE audit_log_hourly")
    console.log(`seeded in ${((performance.now() - seedStart) / 1000).toFixed(1)} s`)

    const key = await makeKey()
    installServiceKey(dataDir, key)
    const tokens = await mintTokens(key, 64)
    const befores: Array<Window> = []
    const durings: Array<Window> = []
    const afters: Array<Window> = []
    for (let round = 1; round <= ROUNDS; round++) {
      const retention = DAYS - round
      const due = Number((await db.query<{ n: string }>(
        `SELECT count(*) AS n FROM audit_logs WHERE "timestamp" < now() - make_interval(days => $1)`, [retention])).rows[0]!.n)
      const server = await startService(dataDir, { databaseUrl: dbUrl, redisUrl: undefined, redisPrefix: "" }, 180_000, {
        AUDIT_RETENTION_DAYS: String(retention)
      })
      const load = startLoad(server, tokens)
      const startedAt = performance.now()
      // The pruning window: from the last poll that saw nothing deleted to the first that saw it all.
      let lastZeroAt = startedAt
      let endAt: number | undefined
      while (endAt === undefined && performance.now() - startedAt < 180_000) {
        const polledAt = performance.now()
        const n = await pruned(server)
        if (n === 0) lastZeroAt = polledAt
        else if (n >= due) endAt = performance.now()
        await sleep(50)
      }
      await sleep(AFTER_MS)
      await load.stop()
      const deleted = await pruned(server)
      await server.stop()
      if (endAt === undefined) throw new Error(`round ${round}: the service deleted ${deleted} of ${due} records in 180 s`)
      const before = window(load.responses, lastZeroAt - BEFORE_MS, lastZeroAt)
      const during = window(load.responses, lastZeroAt, endAt)
      const after = window(load.responses, endAt, endAt + AFTER_MS)
      befores.push(before)
      durings.push(during)
      afters.push(after)
      const failed = Object.entries(load.failures).map(([status, n]) => `${status}×${n}`).join(" ")
      console.log(`\nround ${round}: the service deleted ${deleted} records (AUDIT_RETENTION_DAYS=${retention}) in ${during.seconds.toFixed(2)} s` +
        (failed === "" ? "" : `; failed responses: ${failed}`))
      console.log(`  the 20 s before: ${line(before)}`)
      console.log(`  while pruning:   ${line(during)}`)
      console.log(`  the 10 s after:  ${line(after)}`)
    }
    console.log(`\nall rounds`)
    console.log(`  before:          ${line(pooled(befores))}`)
    console.log(`  while pruning:   ${line(pooled(durings))}`)
    console.log(`  after:           ${line(pooled(afters))}`)
    await db.end()
  } finally {
    rmSync(dataDir, { recursive: true, force: true })
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
    await admin.end()
  }
}

void main().catch((error: unknown) => {
  console.error(error)
  process.exit(2)
})
