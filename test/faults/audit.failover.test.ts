/**
 * docs/audit.md#failover: the audit journal through a Redis failover under load, in a Redis Cluster
 * and in a Sentinel group, with two instances of the service on one PostgreSQL and one key prefix.
 * PostgreSQL is cut first, so the records of the requests answered from then on wait in the
 * instances' memory and in the journal; the Redis primary holding the journal's first shard (in a
 * cluster, about a third of the shards) then takes appends its replica never receives (the replica
 * paused), and is killed; requests keep coming on both instances throughout. Once a replica serves
 * again and PostgreSQL is back, every request that got a response has its record in PostgreSQL
 * (by request id) — including those whose journal entries the promoted replica never had — and
 * none has two. Private topologies (test/support/RedisFailover.ts), started from `redis-server`;
 * the test waits for events, never for time.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { streamKey } from "../../src/AuditLogs/Journal.ts"
import { journalRecords } from "../support/AuditJournal.ts"
import { onPath } from "../support/Binaries.ts"
import { proxiedDatabase } from "../support/DatabaseServer.ts"
import { eventually } from "../support/Eventually.ts"
import { type Cleanups, runCleanups } from "../support/Launcher.ts"
import { clusterFailover, type Failover, sentinelFailover } from "../support/RedisFailover.ts"
import { connectTo } from "../support/RedisModes.ts"
import { viaProxy } from "../support/TcpProxy.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, type TestApp } from "../support/TestApp.ts"

const cleanups: Cleanups = []
afterAll(() => runCleanups(cleanups.reverse()))

/** Requests on every app, one after another per worker, until stopped: the request id of each one answered. */
const loadOn = (apps: ReadonlyArray<{ readonly app: TestApp; readonly token: string }>, agent: string) => {
  const answered: Array<string> = []
  const statuses = new Map<number, number>()
  let running = true
  const worker = async ({ app, token }: { readonly app: TestApp; readonly token: string }) => {
    while (running) {
      try {
        const res = await fetch(`${app.url}/authors?id=1`, { headers: { authorization: `Bearer ${token}`, "user-agent": agent } })
        await res.arrayBuffer()
        answered.push(res.headers.get("x-request-id") ?? "")
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
      } catch {
        // not answered: not owed a record
      }
    }
  }
  const done = Promise.all(apps.flatMap((app) => [worker(app), worker(app), worker(app)]))
  return {
    answered,
    statuses,
    /** Resolves once `n` more requests than now have been answered. */
    more: async (n: number) => {
      const target = answered.length + n
      await eventually(() => answered.length >= target, `${n} more requests answered`)
    },
    stop: async () => {
      running = false
      await done
    }
  }
}

/** The request ids of the records stored for `agent`, with how many rows each has. */
const stored = async (url: string, agent: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query<{ request_id: string; n: string }>(
      "SELECT request_id, count(*) AS n FROM audit_logs WHERE user_agent = $1 GROUP BY request_id",
      [agent]
    )
    return new Map(rows.map((r) => [r.request_id, Number(r.n)]))
  } finally {
    await client.end()
  }
}

const healthOf = async (app: TestApp) => ((await request(app, "GET", "/health")).body as { redis: string }).redis

const scenario = (name: string, make: () => Promise<Failover>) =>
  it(`${name}: the primary killed after appends its replica never received, PostgreSQL away — every answered request's record stored once`, async () => {
    const failover = await make()
    cleanups.push(failover.stop)
    const { db, proxy } = await proxiedDatabase(cleanups)
    const prefix = `test-audit-failover-${randomUUID().slice(0, 8)}:`
    const start = () =>
      startTestApp({
        database: "postgres",
        databaseUrl: viaProxy(db.url!, proxy),
        config: { redis: Option.some(failover.mode.target), redisKeyPrefix: prefix, rateLimitEnabled: false, auditLogEnabled: true }
      })
    const apps = [await start(), await start()] as const
    for (const app of apps) cleanups.push(() => app.close())
    const agent = `audit-failover-${randomUUID()}`
    const load = loadOn(await Promise.all(apps.map(async (app) => ({ app, token: (await login(app, "admin")).access_token }))), agent)
    cleanups.push(load.stop)
    await load.more(50)

    // PostgreSQL away: from now on the records wait in memory and in the journal.
    await proxy.cut()
    await load.more(50)
    // The journal's first shard's primary takes appends (and acknowledges them) that its replica
    // never receives, then is killed. With PostgreSQL away nothing leaves the journal: what it
    // holds then and the promoted replica does not, the failover lost.
    const probe = connectTo(failover.mode)
    cleanups.push(async () => probe.disconnect())
    const inJournal = async () => new Set((await journalRecords(probe, prefix)).map((r) => r.entry.request_id))
    let acknowledged = new Set<string>()
    await failover.kill([streamKey(prefix, "s0")], {
      lagging: async () => {
        await load.more(100)
        acknowledged = await inJournal()
      }
    })
    for (const app of apps) await eventually(async () => (await healthOf(app)) === "unhealthy", "/health to report redis unhealthy")
    await load.more(50)

    await failover.release()
    for (const app of apps) await eventually(async () => (await healthOf(app)) === "healthy", "/health to report redis healthy again")
    // (A read the cluster answers MOVED while the client's slot map catches up is read again.)
    const kept = await eventually(inJournal, "the journal read on the promoted replica")
    const lost = [...acknowledged].filter((id) => !kept.has(id))
    expect(lost.length, "records the old primary acknowledged and the promoted replica never had").toBeGreaterThan(0)
    await load.more(50)
    await proxy.restore()
    await load.more(50)
    await load.stop()

    const answered = new Set(load.answered)
    expect(answered.size).toBe(load.answered.length)
    const rows = await eventually(async () => {
      const now = await stored(db.url!, agent)
      return [...answered].every((id) => now.has(id)) && now
    }, "every answered request's record in PostgreSQL")
    console.log(
      `[failover] audit, ${name}: ${answered.size} requests answered (${[...load.statuses].map(([s, n]) => `${n}×${s}`).join(", ")}), ` +
        `${rows.size} records stored, ${lost.length} of them in journal entries the failover lost`
    )
    expect([...rows].filter(([, n]) => n > 1), "records stored twice").toEqual([])
  })

describe.runIf(onPath("redis-server") && TEST_DATABASE_URL !== undefined)("the audit journal through a Redis failover under load", () => {
  scenario("Redis Cluster", clusterFailover)
  scenario("Sentinel", sentinelFailover)
})
