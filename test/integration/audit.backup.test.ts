/**
 * docs/audit.md#backups and #export, run as written against real PostgreSQL with the client tools
 * (`pg_dump`, `pg_restore`, `psql`): a whole dump restored into an empty database gives back every
 * table with exact totals and nothing to migrate; rows restored without their triggers leave the
 * totals wrong until the page's `rebuild-counters` block counts them again; `audit-export` writes
 * one month of records as CSV.
 */
import { Effect, Layer, Redacted } from "effect"
import { spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type AuditFilters, AuditRepo } from "../../src/AuditLogs/Repo.ts"
import { Database } from "../../src/Db/Database.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

const has = (tool: string) => spawnSync(tool, ["--version"]).status === 0
const tools = ["psql", "pg_dump", "pg_restore"].every(has)

/** The body of the block labelled `example=<name>` in docs/audit.md. */
const example = (name: string) => {
  const page = readFileSync(join(import.meta.dirname, "../../docs/audit.md"), "utf8")
  const match = new RegExp("```\\w* example=" + name + "\\n([\\s\\S]*?)```").exec(page)
  if (match === null) throw new Error(`docs/audit.md has no example=${name}`)
  return match[1]!
}

const run = (command: string, args: ReadonlyArray<string>, env: Record<string, string> = {}, cwd?: string) => {
  const result = spawnSync(command, args, { cwd, encoding: "utf8", env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", ...env } })
  if (result.status !== 0) throw new Error(`${command} ${args.join(" ")} exited ${result.status}: ${result.stderr}`)
  return result.stdout
}

/** Applies the migrations (the service's own migrator) and runs `f` with the database's AuditRepo. */
const withRepo = <A>(url: string, f: (repo: AuditRepo["Service"]) => Effect.Effect<A>) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(AuditRepo.layer.pipe(Layer.provideMerge(Database.layer(Redacted.make(url), 2))))
    return yield* Effect.provide(Effect.flatMap(AuditRepo, f), context)
  })))

const filters: ReadonlyArray<AuditFilters> = [
  {},
  { action_type: "POST" },
  { outcome: "error" },
  { from: new Date("2026-10-03T10:30:00Z"), to: new Date("2026-10-20T07:15:00Z") }
]

const query = async <A extends pg.QueryResultRow>(url: string, text: string, params: ReadonlyArray<unknown> = []) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query<A>(text, params as Array<unknown>)).rows
  } finally {
    await client.end()
  }
}

/** The author total and every audit total the service reports, each beside `count(*)`. */
const totals = async (url: string) => {
  const [authors] = await query<{ total: string; counted: string }>(url, `SELECT (SELECT total FROM author_stats) AS total, (SELECT count(*) FROM authors) AS counted`)
  const audit = await withRepo(url, (repo) => Effect.forEach(filters, (f) => Effect.map(repo.page(f, 1, 1), (p) => p.total)))
  const counted = await Promise.all(filters.map(async (f) => {
    const clauses = [
      f.action_type === undefined ? "true" : `action_type = '${f.action_type}'`,
      f.outcome === undefined ? "true" : `outcome = '${f.outcome}'`,
      f.from === undefined ? "true" : `"timestamp" >= '${f.from.toISOString()}'`,
      f.to === undefined ? "true" : `"timestamp" <= '${f.to.toISOString()}'`
    ]
    return Number((await query<{ n: string }>(url, `SELECT count(*) AS n FROM audit_logs WHERE ${clauses.join(" AND ")}`))[0]!.n)
  }))
  return { reported: [Number(authors!.total), ...audit], counted: [Number(authors!.counted), ...counted] }
}

describe.runIf(TEST_DATABASE_URL !== undefined && tools)("audit backups and export (postgres, psql, pg_dump)", () => {
  const databases: Array<TestDatabase> = []
  let source: string
  let dir: string

  const fresh = async () => {
    const db = await createPostgresDatabase(TEST_DATABASE_URL!)
    databases.push(db)
    return db.url!
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ads-backup-"))
    source = await fresh()
    await withRepo(source, () => Effect.void)
    await query(source, `INSERT INTO authors (name) SELECT 'author-' || g FROM generate_series(1, 57) AS g`)
    // Records an hour apart from 2026-09-25 to 2026-11-05 (so October is a part of them), all kinds.
    await query(source, `INSERT INTO audit_logs (entry_id, "timestamp", user_id, username, action_type, resource, outcome,
        ip_address, user_agent, request_id, correlation_id, response_status, duration_ms)
      SELECT gen_random_uuid(), timestamptz '2026-09-25T00:17:00Z' + g * interval '1 hour', 'user-' || (g % 3), 'name-' || (g % 3),
        (ARRAY['GET','POST','DELETE'])[1 + g % 3], '/authors/' || (g % 2), (ARRAY['success','error'])[1 + g % 2],
        '10.0.0.1', 'backup-test', 'req-' || g, 'corr', 200, 1
      FROM generate_series(0, 41 * 24) AS g`)
    run("pg_dump", ["--format=custom", `--file=${join(dir, "authors.dump")}`, source])
  })
  afterAll(async () => {
    for (const db of databases) await db.dispose()
    rmSync(dir, { recursive: true, force: true })
  })

  it("a whole dump restored into an empty database: every total equals count(*), and the migrator applies nothing", async () => {
    const restored = await fresh()
    run("pg_restore", [`--dbname=${restored}`, join(dir, "authors.dump")])
    const migrations = `SELECT id, applied_at FROM schema_migrations ORDER BY id`
    const before = await query(restored, migrations)
    const { reported, counted } = await totals(restored)
    expect(reported).toEqual(counted)
    expect(counted[0]).toBe(57)
    expect(await query(restored, migrations)).toEqual(before)
    // New ids go on after the restored ones.
    const [next] = await query<{ id: string }>(restored, `INSERT INTO authors (name) VALUES ('after-restore') RETURNING id`)
    expect(Number(next!.id)).toBe(58)
  })

  it("rows restored without their triggers leave the totals wrong; the page's rebuild-counters block makes them exact", async () => {
    const restored = await fresh()
    await withRepo(restored, () => Effect.void)
    run("pg_restore", ["--data-only", "--disable-triggers", "--table=authors", "--table=audit_logs", `--dbname=${restored}`, join(dir, "authors.dump")])
    const wrong = await totals(restored)
    expect(wrong.reported).not.toEqual(wrong.counted)

    run("bash", ["-c", example("rebuild-counters")], { DATABASE_URL: restored })
    const { reported, counted } = await totals(restored)
    expect(reported).toEqual(counted)
    expect(counted[0]).toBe(57)
  })

  it("audit-export writes October's records as CSV, oldest first, with a header", async () => {
    run("bash", ["-c", example("audit-export")], { DATABASE_URL: source }, dir)
    const lines = readFileSync(join(dir, "audit-2026-10.csv"), "utf8").trim().split("\n")
    expect(lines[0]).toBe("id,timestamp,user_id,username,user_roles,action_type,resource,outcome,ip_address,user_agent," +
      "request_id,correlation_id,response_status,duration_ms,request_data,error_message")
    const [{ n }] = await query<{ n: string }>(source,
      `SELECT count(*) AS n FROM audit_logs WHERE "timestamp" >= '2026-10-01T00:00:00Z' AND "timestamp" < '2026-11-01T00:00:00Z'`) as [{ n: string }]
    expect(lines.length - 1).toBe(Number(n))
    expect(Number(n)).toBe(31 * 24)
    // psql writes `2026-10-01 00:17:00+00` (the session's time zone, whichever it is).
    const stamps = lines.slice(1).map((l) => Date.parse(l.split(",")[1]!.replace(" ", "T").replace(/([+-]\d\d)$/, "$1:00")))
    expect(stamps).toEqual([...stamps].sort((a, b) => a - b))
    expect(new Date(stamps[0]!).toISOString()).toBe("2026-10-01T00:17:00.000Z")
  })
})
