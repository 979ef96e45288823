/**
 * The exact totals kept by triggers (migrations 0004, 0006): the author total and the audit
 * rollup are spread over shard rows chosen by the writing backend, so concurrent writers on
 * different shards never wait for each other's counter row, and the totals stay exact (the sums
 * equal `count(*)`), also across the upgrade of a database that already holds rows.
 */
import { Effect, Layer, Redacted } from "effect"
import { cpSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Database } from "../../src/Db/Database.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

const AUTHOR_SHARDS = 32
const AUDIT_SHARDS = 4

const migrate = (url: string, migrationsDir = "migrations") =>
  Effect.runPromise(Effect.scoped(Layer.build(Database.layer(Redacted.make(url), 2, { migrationsDir }))).pipe(Effect.asVoid))

/** A copy of the migrations up to `last`, as a database deployed before the counters were sharded has them. */
const migrationsUpTo = (last: number) => {
  const dir = mkdtempSync(join(tmpdir(), "ads-migrations-"))
  for (const file of readdirSync("migrations")) {
    if (Number(file.slice(0, 4)) <= last) cpSync(join("migrations", file), join(dir, file))
  }
  return dir
}

const connect = async (url: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  return client
}

const pidOf = async (client: pg.Client) => (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid

/** A session whose backend writes to another shard than `pid`'s. */
const sessionOnOtherShard = async (url: string, pid: number, shards: number, opened: Array<pg.Client>) => {
  for (;;) {
    const client = await connect(url)
    opened.push(client)
    if ((await pidOf(client)) % shards !== pid % shards) return client
  }
}

/**
 * Runs `statement` on `session` while another transaction holds its own counter row, and says
 * whether it finished or waited for a lock (read from pg_stat_activity, not from a clock).
 */
const finishesWithoutWaiting = async (observer: pg.Client, session: pg.Client, statement: string) => {
  const pid = await pidOf(session)
  const run = session.query(statement).then(() => "finished" as const)
  let settled = false
  void run.finally(() => (settled = true)).catch(() => {})
  const waited = (async () => {
    while (!settled) {
      const rows = (await observer.query<{ wait: string | null }>(
        "SELECT wait_event_type AS wait FROM pg_stat_activity WHERE pid = $1",
        [pid]
      )).rows
      if (rows[0]?.wait === "Lock") return "waited for a lock" as const
      await new Promise((resolve) => setImmediate(resolve))
    }
    return "finished" as const
  })()
  return Promise.race([run, waited])
}

const auditInsert = (rows: number, action = "GET /authors") => `
  INSERT INTO audit_logs (entry_id, "timestamp", user_id, username, action_type, resource, outcome, ip_address,
    user_agent, request_id, correlation_id, response_status, duration_ms)
  SELECT gen_random_uuid(), now(), 'u1', 'admin', '${action}', '/authors', 'success', '127.0.0.1', 'test',
    gen_random_uuid()::text, 'c1', 200, 1 FROM generate_series(1, ${rows})`

describe.runIf(TEST_DATABASE_URL !== undefined)("sharded counters on PostgreSQL", () => {
  let db: TestDatabase
  beforeAll(async () => {
    db = await createPostgresDatabase(TEST_DATABASE_URL!)
  })
  afterAll(() => db.dispose())

  it("a database deployed before the shards keeps its exact totals through the upgrade", async () => {
    const old = migrationsUpTo(3)
    try {
      await migrate(db.url!, old)
    } finally {
      rmSync(old, { recursive: true, force: true })
    }
    const client = await connect(db.url!)
    try {
      await client.query("INSERT INTO authors (name) SELECT 'before-' || g FROM generate_series(1, 1234) AS g")
      await client.query("DELETE FROM authors WHERE id % 10 = 0")
      await client.query(auditInsert(300))
      await client.query(auditInsert(200, "POST /authors"))
      await client.query("DELETE FROM audit_logs WHERE id % 7 = 0")
      const before = (await client.query("SELECT total::int AS total FROM author_stats")).rows[0]
      expect(before).toEqual({ total: 1234 - 123 })

      await migrate(db.url!)

      expect((await client.query("SELECT total::int AS total FROM author_stats")).rows[0]).toEqual(before)
      expect((await client.query("SELECT count(*)::int AS n FROM author_count_shards")).rows[0]).toEqual({ n: AUTHOR_SHARDS })
      const audit = await client.query<{ action_type: string; counted: number; stored: number }>(`
        SELECT action_type, (SELECT sum(n)::int FROM audit_log_hourly h WHERE h.action_type = l.action_type) AS counted,
          count(*)::int AS stored
        FROM audit_logs l GROUP BY action_type ORDER BY action_type`)
      expect(audit.rows).toEqual([
        { action_type: "GET /authors", counted: audit.rows[0]!.stored, stored: audit.rows[0]!.stored },
        { action_type: "POST /authors", counted: audit.rows[1]!.stored, stored: audit.rows[1]!.stored }
      ])
    } finally {
      await client.end()
    }
  })

  it.each([
    {
      name: "a create does not wait for another session's uncommitted create (different counter rows)",
      shards: AUTHOR_SHARDS,
      held: "INSERT INTO authors (name) VALUES ('held-open')",
      statement: "INSERT INTO authors (name) VALUES ('not-queued')",
      /** After both: the authors total is exact. */
      after: async (observer: pg.Client) => {
        const exact = await observer.query("SELECT (SELECT total FROM author_stats) = (SELECT count(*) FROM authors) AS exact")
        expect(exact.rows[0]).toEqual({ exact: true })
      }
    },
    {
      name: "an audit batch does not wait for another session's uncommitted batch of the same hour and keys",
      shards: AUDIT_SHARDS,
      held: auditInsert(20),
      statement: auditInsert(20),
      after: async () => {}
    }
  ])("$name", async ({ shards, held, statement, after }) => {
    await migrate(db.url!)
    const opened: Array<pg.Client> = []
    try {
      const holder = await connect(db.url!)
      opened.push(holder)
      const observer = await connect(db.url!)
      opened.push(observer)
      await holder.query("BEGIN")
      await holder.query(held)
      const other = await sessionOnOtherShard(db.url!, await pidOf(holder), shards, opened)
      expect(await finishesWithoutWaiting(observer, other, statement)).toBe("finished")
      await holder.query("COMMIT")
      await after(observer)
    } finally {
      await Promise.all(opened.map((c) => c.end()))
    }
  })

  it("16 concurrent sessions inserting and deleting leave both totals exact, each shard holding its sessions' count", async () => {
    await migrate(db.url!)
    const sessions = await Promise.all(Array.from({ length: 16 }, () => connect(db.url!)))
    try {
      const start = await sessions[0]!.query<{ shard: number; n: string }>("SELECT shard, n FROM author_count_shards")
      const expected = new Map(start.rows.map((r) => [r.shard, Number(r.n)]))
      await Promise.all(sessions.map(async (session, s) => {
        const shard = (await pidOf(session)) % AUTHOR_SHARDS
        for (let i = 0; i < 20; i++) {
          // One row, several rows in one statement, and a delete of one of this session's rows.
          await session.query("INSERT INTO authors (name) VALUES ($1)", [`s${s}-one-${i}`])
          await session.query("INSERT INTO authors (name) SELECT $1 || g FROM generate_series(1, 3) AS g", [`s${s}-many-${i}-`])
          await session.query("DELETE FROM authors WHERE name = $1", [`s${s}-many-${i}-2`])
          await session.query(auditInsert(5))
          await session.query("DELETE FROM audit_logs WHERE id = (SELECT max(id) FROM audit_logs WHERE request_id <> '')")
          expected.set(shard, expected.get(shard)! + 3)
        }
      }))
      const check = sessions[0]!
      const shards = await check.query<{ shard: number; n: string }>("SELECT shard, n FROM author_count_shards ORDER BY shard")
      expect(shards.rows.map((r) => [r.shard, Number(r.n)])).toEqual([...expected.entries()].sort((a, b) => a[0] - b[0]))
      expect((await check.query("SELECT (SELECT total FROM author_stats) = (SELECT count(*) FROM authors) AS exact")).rows[0])
        .toEqual({ exact: true })
      const rollup = await check.query<{ mismatched: number }>(`
        SELECT count(*)::int AS mismatched FROM (
          SELECT date_trunc('hour', "timestamp" AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, action_type, outcome, count(*) AS n
          FROM audit_logs GROUP BY 1, 2, 3) AS stored
        FULL JOIN (SELECT hour, action_type, outcome, sum(n) AS n FROM audit_log_hourly GROUP BY 1, 2, 3 HAVING sum(n) <> 0) AS counted
          USING (hour, action_type, outcome)
        WHERE stored.n IS DISTINCT FROM counted.n`)
      expect(rollup.rows[0]).toEqual({ mismatched: 0 })

      await check.query("TRUNCATE authors")
      await check.query("TRUNCATE audit_logs")
      expect((await check.query("SELECT total::int AS total FROM author_stats")).rows[0]).toEqual({ total: 0 })
      expect((await check.query("SELECT count(*)::int AS n FROM audit_log_hourly")).rows[0]).toEqual({ n: 0 })
    } finally {
      await Promise.all(sessions.map((c) => c.end()))
    }
  })
})
