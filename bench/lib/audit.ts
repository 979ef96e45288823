/**
 * What the audit benchmarks share (bench/audit-explain.ts, bench/audit-retention.ts): a scratch
 * database on BENCH_DATABASE_URL (or TEST_DATABASE_URL), and the seed of its audit records.
 */
import { randomUUID } from "node:crypto"

/** The admin URL, a fresh database name on its server and that database's URL; exits 2 without a server. */
export const scratchDatabase = (prefix: string) => {
  const adminUrl = process.env["BENCH_DATABASE_URL"] ?? process.env["TEST_DATABASE_URL"]
  if (adminUrl === undefined) {
    process.stderr.write("Set BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostgreSQL server where a scratch database may be created)\n")
    process.exit(2)
  }
  const name = `${prefix}_${randomUUID().replaceAll("-", "").slice(0, 12)}`
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return { adminUrl, name, url: url.toString() }
}

/**
 * `$1` records evenly over the `$2` days back from now: 10,000 users, 8 actions, 40 resources,
 * 90/7/3 % outcomes. An INSERT like the writer's, so the rollup's triggers count them.
 */
export const AUDIT_SEED = `
INSERT INTO audit_logs (entry_id, "timestamp", user_id, username, user_roles, action_type, resource, outcome, ip_address,
  user_agent, request_id, correlation_id, response_status, duration_ms, request_data, error_message)
SELECT gen_random_uuid(),
  now() - (g * ($2::float8 * 86400 / $1)) * interval '1 second',
  'user-' || (g::bigint * 7919 % 10000), 'name-' || (g::bigint * 7919 % 10000), '["get-authors"]'::jsonb,
  (ARRAY['GET','POST','PUT','DELETE','WS:GET_AUTHORS','WS:GET_AUTHORS_PAGINATED','WS:CREATE_AUTHOR','WS:CONNECT'])[1 + g % 8],
  '/authors/' || (g % 40),
  CASE WHEN g % 100 < 90 THEN 'success' WHEN g % 100 < 97 THEN 'error' ELSE 'permission_denied' END,
  '10.0.' || (g % 250) || '.' || (g % 200), 'bench', gen_random_uuid()::text, 'bench0001',
  CASE WHEN g % 100 < 90 THEN 200 WHEN g % 100 < 97 THEN 404 ELSE 403 END, g % 50, '{}'::jsonb, NULL
FROM generate_series(1, $1) AS g`
