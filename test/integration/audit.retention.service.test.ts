/**
 * Audit retention in the running service (docs/audit.md#retention), on real PostgreSQL: records
 * older than AUDIT_RETENTION_DAYS go, the totals `GET /audit-logs` answers stay `count(*)`,
 * `audit_records_pruned_total` counts them, one INFO line says so; an advisory lock held elsewhere
 * holds the pruning back until it is released; two instances on one database never delete at the
 * same time. The schedule is the app's own, made short (a run at once, then every few ms).
 */
import { type Duration, Layer } from "effect"
import pg from "pg"
import { afterEach, describe, expect, it } from "vitest"
import { RETENTION_LOCK_KEY, RetentionScheduleRef } from "../../src/AuditLogs/Retention.ts"
import { layerLoggerTo } from "../../src/Observability/Logging.ts"
import { proxiedDatabase } from "../support/DatabaseServer.ts"
import { eventually } from "../support/Eventually.ts"
import { type Cleanups, runCleanups } from "../support/Launcher.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { viaProxy } from "../support/TcpProxy.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, type TestApp } from "../support/TestApp.ts"

const DAYS = 30
const DAY_MS = 86_400_000

const schedule = (every: Duration.Input) =>
  Layer.succeed(RetentionScheduleRef, { batchSize: 7, rollupBatchSize: 3, pace: 1, firstRunAfter: "0 millis", every })

describe.runIf(TEST_DATABASE_URL !== undefined)("audit retention in the service (postgres)", () => {
  const cleanups: Cleanups = []
  afterEach(() => runCleanups(cleanups))

  const start = async (options: { every: Duration.Input; databaseUrl?: string; logLevel?: "Info" | "Debug" }) => {
    const lines: Array<Record<string, unknown>> = []
    const app = await startTestApp({
      database: "postgres",
      ...(options.databaseUrl !== undefined ? { databaseUrl: options.databaseUrl } : {}),
      config: { auditRetentionDays: DAYS, rateLimitEnabled: false },
      logLevel: options.logLevel ?? "Info",
      logger: layerLoggerTo("json", (line) => lines.push(JSON.parse(line) as Record<string, unknown>)),
      references: schedule(options.every)
    })
    cleanups.push(app.close)
    return { app, lines }
  }

  const connect = async (app: TestApp) => {
    const client = new pg.Client({ connectionString: app.databaseUrl })
    await client.connect()
    cleanups.push(() => client.end())
    return client
  }

  /** `old` records past the cutoff (a minute to `old` minutes past it) and `kept` ones inside it, in one statement. */
  const seed = (db: pg.Client, old: number, kept: number) =>
    db.query(
      `INSERT INTO audit_logs (entry_id, "timestamp", user_id, username, action_type, resource, outcome, ip_address,
        user_agent, request_id, correlation_id, response_status, duration_ms)
       SELECT gen_random_uuid(), now() - make_interval(days => $1::int, mins => CASE WHEN g <= $2::int THEN g ELSE -(g - $2::int) END),
        'user-' || (g % 3), 'name-' || (g % 3), (ARRAY['GET','POST','DELETE'])[1 + g % 3], '/authors/' || (g % 2),
        (ARRAY['success','error'])[1 + g % 2], '10.0.0.1', 'retention-test', 'seeded-' || g, 'corr', 200, 1
       FROM generate_series(1, $2::int + $3::int) AS g`,
      [DAYS, old, kept]
    )

  const countOld = async (db: pg.Client) =>
    Number((await db.query<{ n: string }>(
      `SELECT count(*) AS n FROM audit_logs WHERE "timestamp" < now() - make_interval(days => $1)`,
      [DAYS]
    )).rows[0]!.n)

  const pruned = async (app: TestApp) => (await scrapeMetrics(app.url)).value("audit_records_pruned_total")

  it("deletes the expired records, keeps the rest, counts and logs them; every total of GET /audit-logs is count(*)", async () => {
    const { app, lines } = await start({ every: "50 millis" })
    const db = await connect(app)
    const before = await pruned(app)
    await seed(db, 40, 25)

    await eventually(async () => expect(await pruned(app) - before).toBe(40), "40 records counted as pruned")
    expect(await countOld(db)).toBe(0)
    expect(Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM audit_logs WHERE request_id LIKE 'seeded-%'`)).rows[0]!.n)).toBe(25)
    // The run's line comes once it has ended (after its last batch was counted, and its rollup).
    const deletedLines = () => lines.filter((l) => typeof l["message"] === "string" && l["message"].startsWith("Audit retention: deleted"))
    await eventually(() => deletedLines().length > 0, "the run's INFO line")
    expect(deletedLines()).toEqual([expect.objectContaining({ level: "INFO", message: `Audit retention: deleted 40 records older than ${DAYS} days`, deleted: 40 })])

    // Totals over the seeded days (the test's own requests, audited now, are after end_date).
    const admin = (await login(app, "admin")).access_token
    const range = `start_date=${new Date(Date.now() - 40 * DAY_MS).toISOString()}&end_date=${new Date(Date.now() - DAY_MS).toISOString()}`
    for (const [query, where, params] of [
      ["", "", []],
      ["&action_type=POST", "AND action_type = $3", ["POST"]],
      ["&outcome=error", "AND outcome = $3", ["error"]],
      ["&user_id=user-1", "AND user_id = $3", ["user-1"]]
    ] as const) {
      const res = await request(app, "GET", `/audit-logs?${range}${query}&per_page=1`, { token: admin })
      expect(res.status).toBe(200)
      const counted = await db.query<{ n: string }>(
        `SELECT count(*) AS n FROM audit_logs WHERE "timestamp" >= $1 AND "timestamp" <= $2 ${where}`,
        [new Date(Date.now() - 40 * DAY_MS), new Date(Date.now() - DAY_MS), ...params]
      )
      expect({ query, total: (res.body as { meta: { total: number } }).meta.total }).toEqual({ query, total: Number(counted.rows[0]!.n) })
    }
  })

  it("waits while another session holds the retention lock, and prunes once it is released", async () => {
    const { app, lines } = await start({ every: "20 millis", logLevel: "Debug" })
    const db = await connect(app)
    const holder = await connect(app)
    await holder.query("SELECT pg_advisory_lock($1)", [RETENTION_LOCK_KEY])
    const before = await pruned(app)
    await seed(db, 30, 5)
    const seen = lines.length
    await eventually(
      () => lines.slice(seen).some((l) => typeof l["message"] === "string" && l["message"].startsWith("Audit retention: another instance is pruning")),
      "a run that found the lock taken after the records were seeded"
    )
    expect(await countOld(db)).toBe(30)
    expect(await pruned(app) - before).toBe(0)

    await holder.query("SELECT pg_advisory_unlock($1)", [RETENTION_LOCK_KEY])
    await eventually(async () => expect(await pruned(app) - before).toBe(30), "30 records counted as pruned")
    expect(await countOld(db)).toBe(0)
  })

  it("a run the database fails logs one WARN with the database's reply, and a later run deletes the records", async () => {
    const { app, lines } = await start({ every: "20 millis" })
    const db = await connect(app)
    await db.query(`CREATE FUNCTION retention_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM gone_rows) THEN RAISE EXCEPTION 'deletes refused for this test'; END IF;
        RETURN NULL;
      END $$`)
    await db.query(`CREATE TRIGGER retention_test_refuse AFTER DELETE ON audit_logs
      REFERENCING OLD TABLE AS gone_rows FOR EACH STATEMENT EXECUTE FUNCTION retention_test_refuse()`)
    const before = await pruned(app)
    await seed(db, 10, 0)
    const warned = await eventually(
      () => lines.find((l) => l["level"] === "WARN" && String(l["message"]).startsWith("Audit retention run failed")) ?? false,
      "a failed run's WARN line"
    )
    expect(warned).toMatchObject({ message: "Audit retention run failed; next run in 20ms", cause: expect.stringContaining("deletes refused for this test") })
    expect(await countOld(db)).toBe(10)

    await db.query("DROP TRIGGER retention_test_refuse ON audit_logs")
    await eventually(async () => expect(await pruned(app) - before).toBe(10), "10 records counted as pruned")
    expect(await countOld(db)).toBe(0)
  })

  it("the database cut while runs fail on it: one outage WARN, not one per run; once it is back the records go", async () => {
    const { db: database, proxy } = await proxiedDatabase(cleanups)
    const { app, lines } = await start({ every: "20 millis", databaseUrl: viaProxy(database.url!, proxy) })
    const db = new pg.Client({ connectionString: database.url })
    await db.connect()
    cleanups.push(() => db.end())
    const before = await pruned(app)
    await proxy.cut()
    await seed(db, 12, 0)
    const began = await eventually(
      () => lines.find((l) => l["level"] === "WARN" && String(l["message"]).startsWith("Outage began: the database")) ?? false,
      "the outage's WARN line"
    )
    expect(began["operation"]).toBe("audit retention")
    // More runs fail meanwhile (one every 20 ms; each a failed connection attempt): none logs a line of its own.
    const errors = async () => (await scrapeMetrics(app.url)).sum("db_errors_total")
    const failedBefore = await errors()
    await eventually(async () => (await errors()) >= failedBefore + 3, "three more failed runs")
    expect(await countOld(db)).toBe(12)

    await proxy.restore()
    await eventually(async () => expect(await pruned(app) - before).toBe(12), "12 records counted as pruned")
    expect(lines.filter((l) => String(l["message"]).startsWith("Audit retention run failed"))).toEqual([])
    expect(lines.filter((l) => String(l["message"]).startsWith("Outage began: the database"))).toHaveLength(1)
  })

  it("two instances on one database: every delete holds the lock (so they never delete together), each record is deleted and counted once", async () => {
    const first = await start({ every: "5 millis" })
    const second = await start({ every: "5 millis", databaseUrl: first.app.databaseUrl! })
    const db = await connect(first.app)
    // A delete of records without the retention lock fails, and the run that made it logs a WARN.
    await db.query(`CREATE FUNCTION retention_test_lock_held() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM deleted_rows) AND NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                       AND classid = 0 AND objid = ${RETENTION_LOCK_KEY} AND objsubid = 1) THEN
          RAISE EXCEPTION 'audit records deleted without the retention lock';
        END IF;
        RETURN NULL;
      END $$`)
    await db.query(`CREATE TRIGGER retention_test_lock_held AFTER DELETE ON audit_logs
      REFERENCING OLD TABLE AS deleted_rows FOR EACH STATEMENT EXECUTE FUNCTION retention_test_lock_held()`)
    const before = await pruned(first.app)
    for (let round = 0; round < 5; round++) await seed(db, 60, 0)

    await eventually(async () => expect(await countOld(db)).toBe(0), "every expired record deleted")
    expect(await pruned(first.app) - before).toBe(300)
    const failures = [...first.lines, ...second.lines].filter((l) => l["level"] === "WARN" && String(l["message"]).startsWith("Audit retention"))
    expect(failures).toEqual([])
  })
})
