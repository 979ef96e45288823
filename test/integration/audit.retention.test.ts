/**
 * Audit retention at the database (docs/audit.md#retention), on embedded PGlite and real
 * PostgreSQL: one run of the pruner (its injectable trigger, `AuditRetention.run`) over records
 * seeded around the cutoff — the rows left, the totals `GET /audit-logs` would report against
 * `count(*)`, the rollup's old hours gone, the metric, and what a concurrent reader sees.
 * The service's own schedule, the lock between instances and the log line: audit.retention.service.test.ts.
 */
import { Effect, Exit, Layer, Option, Redacted, Scope } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import fc from "fast-check"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { type AuditFilters, AuditRepo } from "../../src/AuditLogs/Repo.ts"
import { AuditRetention, type PruneRun, RetentionScheduleRef } from "../../src/AuditLogs/Retention.ts"
import { AppConfig } from "../../src/Config.ts"
import { Database, embeddedPostgres } from "../../src/Db/Database.ts"
import { auditRecordsPrunedTotal } from "../../src/Observability/Metrics.ts"
import { readMetric } from "../support/Metrics.ts"
import { createPostgresDatabase, TEST_DATABASE_URL } from "../support/TestApp.ts"

const DAYS = 30
/** The cutoff, in minutes from now. */
const CUTOFF = -DAYS * 1440
/** Records this close to the cutoff are not seeded: `now()` moves between seeding and pruning. */
const MARGIN = 5

const setups = [
  { name: "embedded", url: undefined as string | undefined },
  ...(TEST_DATABASE_URL !== undefined ? [{ name: "postgres", url: TEST_DATABASE_URL }] : [])
]

const prunedTotal = async () => (await readMetric(auditRecordsPrunedTotal)).value("audit_records_pruned_total")

/** Filters whose totals take each path of AuditRepo's `total`: the rollup, its partial hours, the counted filters. */
const filters: ReadonlyArray<AuditFilters> = [
  {},
  { action_type: "GET" },
  { outcome: "error" },
  { action_type: "POST", outcome: "success" },
  { user_id: "user-1" },
  { resource: "/authors/0" },
  { from: new Date(Date.now() - 31 * 86_400_000 + 17 * 60_000), to: new Date(Date.now() - 29 * 86_400_000 - 13 * 60_000) },
  { outcome: "permission_denied", from: new Date(Date.now() - 30 * 86_400_000 - 3_600_000) }
]

describe.each(setups)("audit retention at the database ($name)", (setup) => {
  let run: <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient | AuditRepo>) => Promise<A>
  let dispose: () => Promise<void>

  beforeAll(async () => {
    let database: Layer.Layer<SqlClient.SqlClient, unknown>
    let drop = async () => {}
    if (setup.url === undefined) {
      database = Layer.unwrap(Effect.map(
        embeddedPostgres({ dataDir: Option.none(), maxConnections: 8 }),
        ({ url }) => Database.layer(url, 4)
      ))
    } else {
      const db = await createPostgresDatabase(setup.url)
      database = Database.layer(Redacted.make(db.url!), 4)
      drop = db.dispose
    }
    const scope = Effect.runSync(Scope.make())
    const context = await Effect.runPromise(Layer.buildWithScope(AuditRepo.layer.pipe(Layer.provideMerge(database)), scope))
    run = (effect) => Effect.runPromise(Effect.provide(effect, context))
    dispose = async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await drop()
    }
  })
  afterAll(() => dispose())
  beforeEach(() => run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`TRUNCATE audit_logs`)))

  const sql = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
    run(Effect.flatMap(SqlClient.SqlClient, (client) => client.unsafe<A>(text, params)))

  /** Records at these offsets from now (minutes), with actions, outcomes, users and resources that vary. */
  const seed = (minutes: ReadonlyArray<number>) =>
    minutes.length === 0 ? Promise.resolve() : sql(
      `INSERT INTO audit_logs (entry_id, "timestamp", user_id, username, action_type, resource, outcome, ip_address,
        user_agent, request_id, correlation_id, response_status, duration_ms)
       SELECT gen_random_uuid(), now() + make_interval(mins => m), 'user-' || (i % 3), 'name-' || (i % 3),
        (ARRAY['GET','POST','DELETE'])[1 + i % 3], '/authors/' || (i % 2),
        (ARRAY['success','error','permission_denied'])[1 + (i / 3) % 3], '10.0.0.1', 'retention-test', 'req-' || m, 'corr', 200, 1
       FROM unnest($1::int[]) WITH ORDINALITY AS x(m, i)`,
      [minutes]
    )

  /** One run with these batch sizes, unpaced unless told (the schedule's own first run never comes during the test). */
  const prune = (batchSize: number, rollupBatchSize = 1_000, pace = 0) =>
    run(Effect.scoped(Effect.gen(function*() {
      const retention = yield* Layer.build(AuditRetention.layer.pipe(
        Layer.provide(AppConfig.layerTest({ auditRetentionDays: DAYS })),
        Layer.provide(Layer.succeed(RetentionScheduleRef, { batchSize, rollupBatchSize, pace, firstRunAfter: "1000 days", every: "1000 days" }))
      ))
      return yield* Effect.service(AuditRetention).pipe(Effect.provide(retention), Effect.flatMap((r) => r.run))
    })))

  const remaining = async () =>
    (await sql<{ m: string }>(`SELECT request_id AS m FROM audit_logs ORDER BY "timestamp"`)).map((r) => Number(r.m.slice(4)))

  /** Every total AuditRepo reports (what `GET /audit-logs` answers) against count(*) with the same filter. */
  const totalsAgainstCount = async () => {
    const out: Array<{ filter: AuditFilters; reported: number; counted: number }> = []
    for (const filter of filters) {
      const reported = await run(Effect.flatMap(AuditRepo, (repo) => repo.page(filter, 1, 1)))
      const [where, params] = whereOf(filter)
      const counted = (await sql<{ n: number }>(`SELECT count(*)::int AS n FROM audit_logs ${where}`, params))[0]!.n
      out.push({ filter, reported: reported.total, counted })
    }
    return out
  }

  /** Rollup rows of the hours before the cutoff's hour (all their records are gone after a run). */
  const oldRollupRows = async () =>
    (await sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM audit_log_hourly
       WHERE hour < date_trunc('hour', (now() - make_interval(days => $1)) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`,
      [DAYS]
    ))[0]!.n

  const expectExact = async (minutes: ReadonlyArray<number>, result: PruneRun, batchSize: number, metricBefore: number) => {
    const old = minutes.filter((m) => m < CUTOFF)
    expect(await remaining()).toEqual(minutes.filter((m) => m > CUTOFF).sort((a, b) => a - b))
    expect(result).toEqual({ deleted: old.length, batches: Math.ceil(old.length / batchSize), busy: false })
    expect(await prunedTotal() - metricBefore).toBe(old.length)
    for (const { filter, reported, counted } of await totalsAgainstCount()) expect({ filter, total: reported }).toEqual({ filter, total: counted })
    expect(await oldRollupRows()).toBe(0)
  }

  it.each([
    { old: 0, batchSize: 5 },
    { old: 1, batchSize: 5 },
    { old: 4, batchSize: 5 },
    { old: 5, batchSize: 5 },
    { old: 6, batchSize: 5 },
    { old: 10, batchSize: 5 },
    { old: 11, batchSize: 5 },
    { old: 7, batchSize: 1 }
  ])("$old expired records in batches of $batchSize: those gone, the rest kept, totals exact", async ({ old, batchSize }) => {
    // Expired records an hour apart, so the rollup holds several old hours; three kept just past the cutoff.
    const minutes = [
      ...Array.from({ length: old }, (_, i) => CUTOFF - MARGIN - 60 * i),
      CUTOFF + MARGIN,
      CUTOFF + MARGIN + 60,
      -1
    ]
    await seed(minutes)
    const before = await prunedTotal()
    const result = await prune(batchSize)
    await expectExact(minutes, result, batchSize, before)
  })

  it("property: any records, any batch size — exactly the expired ones go, every total stays exact, no old rollup row is left", async () => {
    const offset = fc.integer({ min: CUTOFF - 2 * 1440, max: CUTOFF + 2 * 1440 }).filter((m) => Math.abs(m - CUTOFF) > MARGIN)
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(offset, { maxLength: 40 }), fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 4 }), async (minutes, batchSize, rollupBatchSize) => {
        await sql(`TRUNCATE audit_logs`)
        await seed(minutes)
        const before = await prunedTotal()
        const result = await prune(batchSize, rollupBatchSize)
        await expectExact(minutes, result, batchSize, before)
      }),
      { numRuns: 25 }
    )
  })

  it("a record of an old hour written during a run keeps its count: the rollup's total stays count(*)", async () => {
    await seed([CUTOFF - 120, CUTOFF - 121, CUTOFF + 60])
    await prune(2)
    // A late record of an expired hour (a journal written late), after its hour's rows were compacted away.
    await seed([CUTOFF - 122])
    const totals = await totalsAgainstCount()
    for (const { filter, reported, counted } of totals) expect({ filter, total: reported }).toEqual({ filter, total: counted })
    // The next run deletes it, and its hour again adds up to 0.
    const result = await prune(2)
    expect(result.deleted).toBe(1)
    expect(await remaining()).toEqual([CUTOFF + 60])
    expect(await oldRollupRows()).toBe(0)
  })

  it("property: folding the rollup's old hours keeps every group's sum, leaves at most one row per old group and none that is 0", async () => {
    // Hours counted back from the cutoff's hour: 1… are before it (folded); -30, -29 are a day after it (left as they are).
    const row = fc.record({
      hoursAgo: fc.constantFrom(-30, -29, 1, 2, 3, 4, 5, 6),
      action: fc.constantFrom("GET", "POST"),
      shard: fc.integer({ min: 0, max: 3 }),
      n: fc.integer({ min: -3, max: 3 })
    })
    type Row = { readonly hoursAgo: number; readonly action: string; readonly shard: number; readonly n: number }
    const key = (r: Row) => `${r.hoursAgo} ${r.action}`
    const sums = (rows: ReadonlyArray<Row>) => {
      const out = new Map<string, number>()
      for (const r of rows) out.set(key(r), (out.get(key(r)) ?? 0) + r.n)
      return [...out].filter(([, n]) => n !== 0).sort()
    }
    const listed = (rows: ReadonlyArray<Row>) => rows.map((r) => `${key(r)} ${r.shard} ${r.n}`).sort()
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(row, { selector: (r) => `${key(r)} ${r.shard}`, maxLength: 30 }),
        fc.integer({ min: 1, max: 4 }),
        async (rows, rollupBatchSize) => {
          await sql(`TRUNCATE audit_logs`)
          const [{ base }] = await sql<{ base: number }>(
            `SELECT extract(epoch FROM date_trunc('hour', (now() - make_interval(days => $1)) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')::float8 * 1000 AS base`,
            [DAYS]
          ) as [{ base: number }]
          await sql(
            `INSERT INTO audit_log_hourly (hour, action_type, outcome, shard, n)
             SELECT to_timestamp(($1::float8 - h * 3600000) / 1000), a, 'success', s, n
             FROM unnest($2::int[], $3::text[], $4::int[], $5::int[]) AS x(h, a, s, n)`,
            [base, rows.map((r) => r.hoursAgo), rows.map((r) => r.action), rows.map((r) => r.shard), rows.map((r) => r.n)]
          )
          const result = await prune(5, rollupBatchSize)
          expect(result).toEqual({ deleted: 0, batches: 0, busy: false })
          const after = (await sql<{ at: number; action_type: string; shard: number; n: string }>(
            `SELECT extract(epoch FROM hour)::float8 * 1000 AS at, action_type, shard, n FROM audit_log_hourly`
          )).map((r): Row => ({ hoursAgo: Math.round((base - r.at) / 3_600_000), action: r.action_type, shard: r.shard, n: Number(r.n) }))
          expect(sums(after)).toEqual(sums(rows))
          const old = after.filter((r) => r.hoursAgo > 0)
          expect(old.filter((r) => r.n === 0)).toEqual([])
          expect(new Set(old.map(key)).size).toBe(old.length)
          expect(listed(after.filter((r) => r.hoursAgo < 0))).toEqual(listed(rows.filter((r) => r.hoursAgo < 0)))
        }
      ),
      { numRuns: 30 }
    )
  })

  it("records written while runs repeat (old ones and new ones, several writers): every total ends equal to count(*)", async () => {
    let writing = true
    const writer = async (w: number) => {
      for (let i = 0; i < 15; i++) {
        await seed(Array.from({ length: 4 }, (_, k) => (k % 2 === 0 ? CUTOFF - MARGIN - 60 * k - w - 7 * i : CUTOFF + MARGIN + 60 * k + w + 7 * i)))
      }
    }
    const writers = Promise.all([writer(1000), writer(2000)]).finally(() => {
      writing = false
    })
    let runs = 0
    while (writing) {
      await prune(3, 2)
      runs++
    }
    await writers
    await prune(3, 2)
    expect(runs).toBeGreaterThan(0)
    expect((await remaining()).every((m) => m > CUTOFF)).toBe(true)
    for (const { filter, reported, counted } of await totalsAgainstCount()) expect({ filter, total: reported }).toEqual({ filter, total: counted })
    expect(await oldRollupRows()).toBe(0)
  })

  it("batches are paced: after each, a pause of at least `pace` times what it took", async () => {
    const pace = 20
    await sql(`CREATE TABLE IF NOT EXISTS retention_test_batches (started timestamptz, ended timestamptz)`)
    await sql(`TRUNCATE retention_test_batches`)
    await sql(`CREATE OR REPLACE FUNCTION retention_test_batch() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM gone_rows) THEN
          INSERT INTO retention_test_batches VALUES (statement_timestamp(), clock_timestamp());
        END IF;
        RETURN NULL;
      END $$`)
    await sql(`CREATE TRIGGER retention_test_batch AFTER DELETE ON audit_logs
      REFERENCING OLD TABLE AS gone_rows FOR EACH STATEMENT EXECUTE FUNCTION retention_test_batch()`)
    try {
      await seed(Array.from({ length: 30 }, (_, i) => CUTOFF - MARGIN - i))
      expect(await prune(5, 1_000, pace)).toEqual({ deleted: 30, batches: 6, busy: false })
      const batches = (await sql<{ started: number; ended: number }>(
        `SELECT extract(epoch FROM started)::float8 * 1000 AS started, extract(epoch FROM ended)::float8 * 1000 AS ended
         FROM retention_test_batches ORDER BY started`
      ))
      expect(batches).toHaveLength(6)
      // What the service timed of a batch includes the round trip, so it is at least the statement's own time.
      const short = batches.slice(1).flatMap((next, i) => {
        const before = batches[i]!
        const pause = next.started - before.ended
        return pause >= pace * (before.ended - before.started) ? [] : [{ batch: i + 1, tookMs: before.ended - before.started, pauseMs: pause }]
      })
      expect(short).toEqual([])
    } finally {
      await sql(`DROP TRIGGER retention_test_batch ON audit_logs`)
    }
  })

  it("a reader during a run never sees part of a batch: every total is the kept records plus whole batches", async () => {
    const batchSize = 25
    const kept = [CUTOFF + 60, CUTOFF + 120, -5]
    const old = Array.from({ length: 40 * batchSize }, (_, i) => CUTOFF - MARGIN - i)
    await seed([...old, ...kept])
    const seen = new Set<number>()
    let done = false
    const reader = (async () => {
      while (!done) {
        const page = await run(Effect.flatMap(AuditRepo, (repo) => repo.page({}, 1, 1)))
        seen.add(page.total)
      }
    })()
    const result = await prune(batchSize).finally(() => {
      done = true
    })
    await reader
    expect(result.deleted).toBe(old.length)
    const partial = [...seen].filter((total) => (total - kept.length) % batchSize !== 0)
    expect(partial).toEqual([])
    expect((await run(Effect.flatMap(AuditRepo, (repo) => repo.page({}, 1, 1)))).total).toBe(kept.length)
  })
})

/** The WHERE of AuditRepo's filters, for the counts the totals are checked against. */
const whereOf = (f: AuditFilters): [string, Array<unknown>] => {
  const clauses: Array<string> = []
  const params: Array<unknown> = []
  const add = (column: string, op: string, value: unknown) => {
    params.push(value)
    clauses.push(`${column} ${op} $${params.length}`)
  }
  if (f.user_id !== undefined) add("user_id", "=", f.user_id)
  if (f.username !== undefined) add("username", "=", f.username)
  if (f.action_type !== undefined) add("action_type", "=", f.action_type)
  if (f.resource !== undefined) add("resource", "=", f.resource)
  if (f.outcome !== undefined) add("outcome", "=", f.outcome)
  if (f.from !== undefined) add(`"timestamp"`, ">=", f.from)
  if (f.to !== undefined) add(`"timestamp"`, "<=", f.to)
  return [clauses.length === 0 ? "" : `WHERE ${clauses.join(" AND ")}`, params]
}
