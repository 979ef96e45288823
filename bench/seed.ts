/**
 * Seeds a migrated database for the benchmark (run by bench/run.ts as a child process, or by hand):
 * N authors and M audit records, all with `INSERT … SELECT … generate_series`, then VACUUM ANALYZE.
 * Everything is derived from `--anchor`, so two databases seeded with the same arguments hold the
 * same rows (same ids, names, timestamps) — the runner compares both servers' answers on that.
 *
 *   node bench/seed.ts --url postgres://…/db | --pglite <DATA_DIR>/pgdata  [--authors 10000] [--audit 1000000] [--anchor ISO]
 *
 * Prints one JSON line: {"authors_s": …, "audit_s": …, "vacuum_s": …}.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"

/** Letters of seeded names; a 3-letter search over them matches ~0.3 % of the authors. */
export const NAME_ALPHABET = "aeioulnrstbcdgmp"

/** Pseudo-random two-word names (md5 digits mapped onto NAME_ALPHABET), unique by their number. */
export const SEED_AUTHORS = `
INSERT INTO authors (name, created_at)
SELECT initcap(translate(substr(md5(g::text), 1, 7), '0123456789abcdef', '${NAME_ALPHABET}')) || ' ' ||
       initcap(translate(substr(md5(g::text), 8, 9), '0123456789abcdef', '${NAME_ALPHABET}')) || ' ' || g,
       $2::timestamptz - ($1 - g) * interval '1 second'
FROM generate_series(1, $1::int) AS g`

/** bench/audit-explain.ts's records (10,000 users, 8 actions, 40 resources, 90/7/3 % outcomes over 365 days), anchored. */
export const SEED_AUDIT = `
INSERT INTO audit_logs (entry_id, "timestamp", user_id, username, user_roles, action_type, resource, outcome, ip_address,
  user_agent, request_id, correlation_id, response_status, duration_ms, request_data, error_message)
SELECT md5('entry' || g)::uuid,
  $2::timestamptz - (g * (365.0 * 86400 / $1)) * interval '1 second',
  'user-' || (g::bigint * 7919 % 10000), 'name-' || (g::bigint * 7919 % 10000), '["get-authors"]'::jsonb,
  (ARRAY['GET','POST','PUT','DELETE','WS:GET_AUTHORS','WS:GET_AUTHORS_PAGINATED','WS:CREATE_AUTHOR','WS:CONNECT'])[1 + g % 8],
  '/authors/' || (g % 40),
  CASE WHEN g % 100 < 90 THEN 'success' WHEN g % 100 < 97 THEN 'error' ELSE 'permission_denied' END,
  '10.0.' || (g % 250) || '.' || (g % 200), 'bench', md5('request' || g)::uuid::text, 'bench0001',
  CASE WHEN g % 100 < 90 THEN 200 WHEN g % 100 < 97 THEN 404 ELSE 403 END, g % 50, '{}'::jsonb, NULL
FROM generate_series(1, $1::int) AS g`

interface Exec {
  readonly query: (text: string, params?: Array<unknown>) => Promise<unknown>
  readonly close: () => Promise<void>
}

const open = async (target: { url: string } | { pglite: string }): Promise<Exec> => {
  if ("url" in target) {
    const client = new pg.Client({ connectionString: target.url })
    await client.connect()
    return { query: (text, params) => client.query(text, params), close: () => client.end() }
  }
  const db = await PGlite.create({ dataDir: target.pglite, extensions: { pg_trgm } })
  return { query: (text, params) => (params === undefined ? db.exec(text) : db.query(text, params)), close: () => db.close() }
}

export const seed = async (target: { url: string } | { pglite: string }, authors: number, audit: number, anchor: Date) => {
  const db = await open(target)
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
    if (authors > 0) await db.query(SEED_AUTHORS, [authors, anchor.toISOString()])
    const authors_s = lap()
    if (audit > 0) await db.query(SEED_AUDIT, [audit, anchor.toISOString()])
    const audit_s = lap()
    await db.query("VACUUM ANALYZE")
    return { authors_s, audit_s, vacuum_s: lap() }
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
  if (url === undefined && dir === undefined) {
    process.stderr.write("usage: seed.ts --url <postgres url> | --pglite <pgdata dir> [--authors N] [--audit N] [--anchor ISO]\n")
    process.exit(2)
  }
  const result = await seed(url !== undefined ? { url } : { pglite: dir! }, Number(arg("authors") ?? 10_000), Number(arg("audit") ?? 1_000_000), new Date(arg("anchor") ?? Date.now()))
  process.stdout.write(`${JSON.stringify(result)}\n`)
}
