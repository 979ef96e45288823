/**
 * Every metric of the service, in one place, with the exact names and labels of
 * docs/operations.md#metrics--get-metrics. Code records where things happen; this module only declares.
 */
import { readFileSync } from "node:fs"
import client from "prom-client"

export const registry = new client.Registry()
client.collectDefaultMetrics({ register: registry })

const packageVersion = (() => {
  try {
    return (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version
  } catch {
    return "unknown"
  }
})()

export const httpRequestsTotal = new client.Counter({
  name: "http_requests_total",
  help: "HTTP requests by method, route template and status code",
  labelNames: ["method", "endpoint", "status_code"] as const,
  registers: [registry]
})
export const httpRequestDuration = new client.Histogram({
  name: "http_request_duration_seconds",
  help: "HTTP request duration in seconds",
  labelNames: ["method", "endpoint"] as const,
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  registers: [registry]
})
export const httpRequestsInProgress = new client.Gauge({
  name: "http_requests_in_progress",
  help: "HTTP requests being served",
  labelNames: ["method", "endpoint"] as const,
  registers: [registry]
})
/**
 * The HTTP series of one method and route template, resolved once: prom-client hashes a label
 * object on every call, which the front door would otherwise pay four times per request.
 * Bounded: methods are the parser's, endpoints are route templates (or `unmatched`).
 */
const routeSeries = new Map<string, ReturnType<typeof makeRouteSeries>>()
const makeRouteSeries = (method: string, endpoint: string) => {
  const byStatus = new Map<number, client.Counter.Internal>()
  return {
    inProgress: httpRequestsInProgress.labels(method, endpoint),
    duration: httpRequestDuration.labels(method, endpoint),
    total: (status: number) => {
      let counter = byStatus.get(status)
      if (counter === undefined) {
        counter = httpRequestsTotal.labels(method, endpoint, String(status))
        byStatus.set(status, counter)
      }
      return counter
    }
  }
}
export const httpSeries = (method: string, endpoint: string) => {
  const key = `${method} ${endpoint}`
  let series = routeSeries.get(key)
  if (series === undefined) {
    series = makeRouteSeries(method, endpoint)
    routeSeries.set(key, series)
  }
  return series
}

export const wsConnectionsActive = new client.Gauge({
  name: "ws_connections_active",
  help: "Open WebSocket connections on this instance",
  registers: [registry]
})
export const wsConnectionsTotal = new client.Counter({
  name: "ws_connections_total",
  help: "WebSocket connection attempts by outcome",
  labelNames: ["status"] as const,
  registers: [registry]
})
export const wsMessagesReceived = new client.Counter({
  name: "ws_messages_received_total",
  help: "WebSocket messages received",
  registers: [registry]
})
export const wsMessagesSent = new client.Counter({
  name: "ws_messages_sent_total",
  help: "WebSocket messages sent",
  registers: [registry]
})
export const wsMessageProcessingDuration = new client.Histogram({
  name: "ws_message_processing_duration_seconds",
  help: "WebSocket message processing time by package",
  labelNames: ["pkg_id"] as const,
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
  registers: [registry]
})
export const dbQueryDuration = new client.Histogram({
  name: "db_query_duration_seconds",
  help: "Database query duration by operation",
  labelNames: ["operation"] as const,
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
  registers: [registry]
})
export const dbConnectionsActive = new client.Gauge({
  name: "db_connections_active",
  help: "Database connections checked out of the pool",
  registers: [registry]
})
export const dbErrorsTotal = new client.Counter({
  name: "db_errors_total",
  help: "Database errors by operation and error type",
  labelNames: ["operation", "error_type"] as const,
  registers: [registry]
})
export const rateLimitHitsTotal = new client.Counter({
  name: "rate_limit_hits_total",
  help: "Requests refused by a rate limit",
  labelNames: ["limit_type"] as const,
  registers: [registry]
})
/** docs/errors-and-limits.md#http-rate-limit: a rate-limit store failure is counted (and logged), whichever fail mode applies. */
export const rateLimitStoreErrorsTotal = new client.Counter({
  name: "rate_limit_store_errors_total",
  help: "Rate-limit checks that could not reach the store (RATE_LIMIT_FAIL_MODE decided)",
  labelNames: ["limit_type"] as const,
  registers: [registry]
})
export const authAttemptsTotal = new client.Counter({
  name: "auth_attempts_total",
  help: "Authentications (logins, bearer tokens, WebSocket handshakes) by outcome",
  labelNames: ["status"] as const,
  registers: [registry]
})
export const tokenValidationTotal = new client.Counter({
  name: "token_validation_total",
  help: "JWT verifications by outcome",
  labelNames: ["status"] as const,
  registers: [registry]
})
/**
 * Bounded memory (issue "Reliability"): every in-process map or queue that grows with clients has
 * a cap, and what the cap does is counted here.
 */
export const tokenCacheEntries = new client.Gauge({
  name: "token_cache_entries",
  help: "Verified tokens held by the token-verification cache (capped; the oldest is evicted first)",
  registers: [registry]
})
export const tokenCacheEvictionsTotal = new client.Counter({
  name: "token_cache_evictions_total",
  help: "Verified tokens evicted from the full token-verification cache (verified again when next seen)",
  registers: [registry]
})
export const rateLimitKeys = new client.Gauge({
  name: "rate_limit_keys",
  help: "Keys (users, IPs, usernames) held by the in-process rate limiter (without Redis)",
  registers: [registry]
})
export const rateLimitKeysEvictedTotal = new client.Counter({
  name: "rate_limit_keys_evicted_total",
  help: "Keys with hits still in their window evicted from the full in-process rate limiter (least recently used first)",
  registers: [registry]
})
export const wsSendQueueOverflowsTotal = new client.Counter({
  name: "ws_send_queue_overflows_total",
  help: "WebSocket connections dropped because more than their send bound (4 MiB) waited to be sent",
  registers: [registry]
})
/** Why an upgrade to `/web` was refused before the WebSocket existed (no token was verified). */
const wsUpgradeRefusals = ["rate_limit", "capacity"] as const
export const wsUpgradesRefusedTotal = new client.Counter({
  name: "ws_upgrades_refused_total",
  help: "WebSocket upgrades refused by reason (rate_limit: per client IP; capacity: WS_MAX_CONNECTIONS)",
  labelNames: ["reason"] as const,
  registers: [registry]
})
for (const reason of wsUpgradeRefusals) wsUpgradesRefusedTotal.inc({ reason }, 0)
export const wsBroadcastsInvalidTotal = new client.Counter({
  name: "ws_broadcasts_invalid_total",
  help: "Messages on the Redis broadcast channel dropped because they are not a valid broadcast",
  registers: [registry]
})

/** Why an audit record was not stored (docs/audit.md#guarantees). */
export const auditDropReasons = ["buffer_full", "stream_full", "shutdown", "refused", "unreadable"] as const
export type AuditDropReason = typeof auditDropReasons[number]
export const auditRecordsDroppedTotal = new client.Counter({
  name: "audit_records_dropped_total",
  help: "Audit records not stored, by reason (buffer_full, stream_full, shutdown, refused, unreadable)",
  labelNames: ["reason"] as const,
  registers: [registry]
})
// Every reason shows from the start at 0, so an alert on its rate has a series to watch.
for (const reason of auditDropReasons) auditRecordsDroppedTotal.inc({ reason }, 0)
/** docs/audit.md#retention: records deleted by the retention (AUDIT_RETENTION_DAYS), counted as each batch commits. */
export const auditRecordsPrunedTotal = new client.Counter({
  name: "audit_records_pruned_total",
  help: "Audit records deleted because they were older than AUDIT_RETENTION_DAYS",
  registers: [registry]
})
/** Audit records the Redis writer leaves in its journal for a recovery scan (docs/audit.md#the-redis-journal). */
export const auditRecordsDeferredTotal = new client.Counter({
  name: "audit_records_deferred_total",
  help: "Audit records appended to the Redis journal but not held in memory (past the writer's bound, PostgreSQL down or slow): a recovery scan writes them, 30 s or more later",
  registers: [registry]
})
export const auditBufferBytes = new client.Gauge({
  name: "audit_buffer_bytes",
  help: "Estimated bytes of audit records waiting in the in-process buffer (bounded; over it records are dropped as buffer_full)",
  registers: [registry]
})
/** Why an on-demand profiling capture was refused (one at a time; none when disabled: docs/operations.md#profiling). */
export const profilingRefusals = ["running", "disabled"] as const
export const profilingCapturesRefusedTotal = new client.Counter({
  name: "profiling_captures_refused_total",
  help: "On-demand profiling captures refused with 409, by reason (running, disabled)",
  labelNames: ["reason"] as const,
  registers: [registry]
})
for (const reason of profilingRefusals) profilingCapturesRefusedTotal.inc({ reason }, 0)
/** The read cache of author reads (Authors/ReadCache.ts), bounded by READ_CACHE_MAX_BYTES. */
export const readCacheHitsTotal = new client.Counter({
  name: "read_cache_hits_total",
  help: "Author reads answered from the read cache (or by a concurrent identical read) without a database read; a page made from its kept rows counts them as one",
  registers: [registry]
})
export const readCacheMissesTotal = new client.Counter({
  name: "read_cache_misses_total",
  help: "Author reads the read cache could check but did not hold: read from the database (a page made from its kept rows whose total was read counts one)",
  registers: [registry]
})
export const readCacheBypassedTotal = new client.Counter({
  name: "read_cache_bypassed_total",
  help: "Author reads the read cache could not check (no generation from Redis, the LISTEN connection down): read from the database, not stored",
  registers: [registry]
})
export const readCacheEvictionsTotal = new client.Counter({
  name: "read_cache_evictions_total",
  help: "Answers evicted from the full read cache (least recently used first)",
  registers: [registry]
})
export const readCacheBytes = new client.Gauge({
  name: "read_cache_bytes",
  help: "Bytes held by the read cache (answers' text plus a fixed overhead per entry; at most READ_CACHE_MAX_BYTES)",
  registers: [registry]
})
export const readCacheEntries = new client.Gauge({
  name: "read_cache_entries",
  help: "Answers held by the read cache",
  registers: [registry]
})
export const readCacheInvalidationErrorsTotal = new client.Counter({
  name: "read_cache_invalidation_errors_total",
  help: "Writes whose generations could not be bumped in Redis (the other instances learn of them from PostgreSQL's change feed)",
  registers: [registry]
})
/** The exact author total repaired after rows were written with triggers off (Authors/Authors.ts `checkTotal`). */
export const authorTotalRepairsTotal = new client.Counter({
  name: "author_total_repairs_total",
  help: "Times the exact author total (author_count_shards) was found to differ from count(*) and was repaired",
  registers: [registry]
})
/** Writes in batches (Authors/Authors.ts, docs/architecture.md#writes-in-batches). */
export const writeOperations = ["create", "rename", "delete"] as const
export type WriteOperation = typeof writeOperations[number]
export const authorWriteBatchSize = new client.Histogram({
  name: "author_write_batch_size",
  help: "Requests answered by each author write statement, by operation (create, rename, delete); a request retried alone after its batch failed is a batch of 1",
  labelNames: ["operation"] as const,
  buckets: [1, 2, 4, 8, 16, 32, 64, 128],
  registers: [registry]
})
export const authorWritesWaiting = new client.Gauge({
  name: "author_writes_waiting",
  help: "Author writes not answered yet: waiting for the batch being written, or in it, by operation",
  labelNames: ["operation"] as const,
  registers: [registry]
})
/** One series per operation, resolved once. */
export const writeSeries = Object.fromEntries(writeOperations.map((operation) => [operation, {
  batchSize: authorWriteBatchSize.labels(operation),
  waiting: authorWritesWaiting.labels(operation)
}])) as Readonly<Record<WriteOperation, { readonly batchSize: client.Histogram.Internal<"operation">; readonly waiting: client.Gauge.Internal<"operation"> }>>
export const appInfo = new client.Gauge({
  name: "app_info",
  help: "Application information",
  labelNames: ["version", "python_version", "environment", "runtime"] as const,
  registers: [registry]
})

/** docs/operations.md#metrics--get-metrics: `python_version` is kept for dashboards and holds the runtime version. */
export const setAppInfo = (environment: string) => {
  appInfo.reset()
  appInfo.set({ version: packageVersion, python_version: `node ${process.version}`, environment, runtime: "node" }, 1)
}

export const appVersion = packageVersion
