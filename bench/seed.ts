/**
 * Seeds a bench database whose schema already exists — the service's (created by its migrations)
 * or the baseline's (created by the baseline at its first start) — with N authors and M audit
 * records, all with `INSERT … SELECT … generate_series` into the tables without their secondary
 * indexes (built again after each load), then VACUUM ANALYZE. Run by
 * bench/run.ts as a child process, or by hand.
 *
 * Both schemas get the same rows: the same authors (ids 1…N given explicitly, names,
 * created_at) and the same audit records (ids 1…M, timestamps, users, actions, outcomes …), each
 * inserted into its own table layout. Everything derives from `--anchor`, so two databases seeded
 * with the same arguments answer alike; `fingerprint` lets the runner check that they do.
 *
 *   node bench/seed.ts --schema service|baseline (--url postgres://…/db | --pglite <dir>/pgdata)
 *                      [--authors 10000] [--audit 1000000] [--anchor ISO]
 *
 * Prints one JSON line: {"authors_s": …, "audit_s": …, "vacuum_s": …, "fingerprint": {…}}.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"

export type SchemaName = "service" | "baseline"

/** Letters of seeded names; a 3-letter search over them matches ~0.3 % of the authors. */
export const NAME_ALPHABET = "aeioulnrstbcdgmp"

/**
 * Pseudo-random two-word names (md5 digits mapped onto NAME_ALPHABET), unique by their number;
 * explicit ids (OVERRIDING SYSTEM VALUE: the service's id is GENERATED ALWAYS), so both databases
 * hold the same id for the same author whatever order the rows are produced in.
 */
export const SEED_AUTHORS = `
INSERT INTO authors (id, name, created_at) OVERRIDING SYSTEM VALUE
SELECT g,
       initcap(translate(substr(md5(g::text), 1, 7), '0123456789abcdef', '${NAME_ALPHABET}')) || ' ' ||
       initcap(translate(substr(md5(g::text), 8, 9), '0123456789abcdef', '${NAME_ALPHABET}')) || ' ' || g,
       $2::timestamptz - ($1 - g) * interval '1 second'
FROM generate_series(1, $1::int) AS g`

/** bench/audit-explain.ts's records (10,000 users, 8 actions, 40 resources, 90/7/3 % outcomes over 365 days), anchored; id g. */
const AUDIT_ROWS = `
SELECT g AS id,
  $2::timestamptz - (g * (365.0 * 86400 / $1)) * interval '1 second' AS ts,
  'user-' || (g::bigint * 7919 % 10000) AS user_id, 'name-' || (g::bigint * 7919 % 10000) AS username, '["get-authors"]'::jsonb AS user_roles,
  (ARRAY['GET','POST','PUT','DELETE','WS:GET_AUTHORS','WS:GET_AUTHORS_PAGINATED','WS:CREATE_AUTHOR','WS:CONNECT'])[1 + g % 8] AS action_type,
  '/authors/' || (g % 40) AS resource,
  CASE WHEN g % 100 < 90 THEN 'success' WHEN g % 100 < 97 THEN 'error' ELSE 'permission_denied' END AS outcome,
  '10.0.' || (g % 250) || '.' || (g % 200) AS ip_address, 'bench' AS user_agent, md5('request' || g)::uuid::text AS request_id,
  'bench0001' AS correlation_id, CASE WHEN g % 100 < 90 THEN 200 WHEN g % 100 < 97 THEN 404 ELSE 403 END AS response_status,
  g % 50 AS duration_ms, '{}'::jsonb AS request_data, NULL::text AS error_message
FROM generate_series(1, $1::int) AS g`

const AUDIT_COLUMNS = `id, "timestamp", user_id, username, user_roles, action_type, resource, outcome, ip_address, user_agent, request_id,
  correlation_id, response_status, duration_ms, request_data, error_message`

/** Each schema's INSERT of the same records (the service's table also has its writer's `entry_id`). */
export const SEED_AUDIT: Record<SchemaName, string> = {
  service: `INSERT INTO audit_logs (entry_id, ${AUDIT_COLUMNS}) OVERRIDING SYSTEM VALUE
    SELECT md5('entry' || r.id)::uuid, r.* FROM (${AUDIT_ROWS}) AS r`,
  baseline: `INSERT INTO audit_logs (${AUDIT_COLUMNS}) OVERRIDING SYSTEM VALUE SELECT * FROM (${AUDIT_ROWS}) AS r`
}

/** New rows continue after the seeded ids. */
const ADVANCE_SEQUENCES = [
  "SELECT setval(pg_get_serial_sequence('authors', 'id'), (SELECT max(id) FROM authors))",
  "SELECT setval(pg_get_serial_sequence('audit_logs', 'id'), (SELECT max(id) FROM audit_logs))"
]

/**
 * What the API can show of the seeded rows, summed over hashes: equal fingerprints mean both
 * databases hold the same authors (id, name, created_at to the microsecond) and the same audit
 * records (every field the listing returns).
 */
export const FINGERPRINT = `
SELECT (SELECT count(*)::int FROM authors) AS authors,
  (SELECT coalesce(sum(hashtext(concat_ws('|', id, name, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')))::bigint), 0)::text FROM authors) AS authors_hash,
  (SELECT count(*)::int FROM audit_logs) AS audit,
  (SELECT coalesce(sum(hashtext(concat_ws('|', id, to_char("timestamp" AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), user_id, username, action_type,
    resource, outcome, ip_address, request_id, response_status, duration_ms))::bigint), 0)::text FROM audit_logs) AS audit_hash`

/**
 * Loads rows into `table` without its secondary indexes, then builds them again once, sorted,
 * instead of growing each index one row at a time (1,000,000 authors on PostgreSQL, 2 busy
 * cores: the baseline's 29 → 13 s, the service's 56 → 33 s, about half of it building the trigram
 * index). The primary key stays (ids arrive in order).
 * Unique constraints and the other indexes are read from the catalog and made again from their
 * own definitions, so whatever migrations/ or the baseline's schema holds is what the table has
 * after. In one transaction: a failure leaves the table as it was.
 */
const withoutSecondaryIndexes = async (db: Exec, table: string, load: () => Promise<void>) => {
  const constraints = await db.query(
    "SELECT format('%I', conname) AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'u'",
    [table]
  )
  const indexes = await db.query(
    `SELECT indexrelid::regclass::text AS name, pg_get_indexdef(indexrelid) AS def FROM pg_index i
     WHERE indrelid = $1::regclass AND NOT indisprimary AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`,
    [table]
  )
  await db.query("BEGIN")
  try {
    for (const c of constraints) await db.query(`ALTER TABLE ${table} DROP CONSTRAINT ${String(c["name"])}`)
    for (const i of indexes) await db.query(`DROP INDEX ${String(i["name"])}`)
    await load()
    for (const c of constraints) await db.query(`ALTER TABLE ${table} ADD CONSTRAINT ${String(c["name"])} ${String(c["def"])}`)
    for (const i of indexes) await db.query(String(i["def"]))
    await db.query("COMMIT")
  } catch (error) {
    await db.query("ROLLBACK").catch(() => undefined)
    throw error
  }
}

interface Exec {
  readonly query: (text: string, params?: Array<unknown>) => Promise<ReadonlyArray<Record<string, unknown>>>
  readonly close: () => Promise<void>
}

const open = async (target: { url: string } | { pglite: string }, schema: SchemaName): Promise<Exec> => {
  if ("url" in target) {
    const client = new pg.Client({ connectionString: target.url })
    await client.connect()
    // Room to sort index builds (the trigram index above all) in memory; PGlite keeps its default.
    await client.query("SET maintenance_work_mem = '256MB'")
    return { query: async (text, params) => (await client.query(text, params)).rows, close: () => client.end() }
  }
  // The service's schema has pg_trgm (its search index); the baseline's does not.
  const db = await PGlite.create({ dataDir: target.pglite, ...(schema === "service" ? { extensions: { pg_trgm } } : {}) })
  return {
    query: async (text, params) => (params === undefined ? (await db.exec(text)).at(-1)?.rows ?? [] : (await db.query<Record<string, unknown>>(text, params)).rows),
    close: () => db.close()
  }
}

export const seed = async (target: { url: string } | { pglite: string }, schema: SchemaName, authors: number, audit: number, anchor: Date) => {
  const db = await open(target, schema)
  try {
    const lap = (() => {
      let t = performance.now()
      return () => {
        const now = performance.now()
        const s = (now - t) / 1000
        t = now
        return Math.round(s * 100) / 100
      }
    })()
    if (authors > 0) await withoutSecondaryIndexes(db, "authors", async () => void await db.query(SEED_AUTHORS, [authors, anchor.toISOString()]))
    const authors_s = lap()
    if (audit > 0) await withoutSecondaryIndexes(db, "audit_logs", async () => void await db.query(SEED_AUDIT[schema], [audit, anchor.toISOString()]))
    for (const sql of ADVANCE_SEQUENCES) await db.query(sql)
    const audit_s = lap()
    await db.query("VACUUM ANALYZE")
    const vacuum_s = lap()
    const fingerprint = (await db.query(FINGERPRINT))[0]
    return { authors_s, audit_s, vacuum_s, fingerprint_s: lap(), fingerprint }
  } finally {
    await db.close()
  }
}

const arg = (name: string) => {
  const i = process.argv.indexOf(`--${name}`)
  return i === -1 ? undefined : process.argv[i + 1]
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  const url = arg("url")
  const dir = arg("pglite")
  const schema = arg("schema")
  if ((url === undefined && dir === undefined) || (schema !== "service" && schema !== "baseline")) {
    process.stderr.write("usage: seed.ts --schema service|baseline (--url <postgres url> | --pglite <pgdata dir>) [--authors N] [--audit N] [--anchor ISO]\n")
    process.exit(2)
  }
  const result = await seed(url !== undefined ? { url } : { pglite: dir! }, schema, Number(arg("authors") ?? 10_000), Number(arg("audit") ?? 1_000_000), new Date(arg("anchor") ?? Date.now()))
  process.stdout.write(`${JSON.stringify(result)}\n`)
}
