/**
 * Database metrics (INTERFACE §GET /metrics): `db_query_duration_seconds{operation}`,
 * `db_connections_active` and `db_errors_total{operation,error_type}`, recorded at the one place
 * every statement passes — the `pg` pool and its clients — so the repositories, the migrator, the
 * audit writer and the health probe are all counted without knowing it. Spans for the same
 * statements come from @effect/sql itself (CONTRACT §8).
 */
import type pg from "pg"
import { dbConnectionsActive, dbErrorsTotal, dbQueryDuration } from "../Observability/Metrics.ts"

/** Bounded label values: the statement's leading keyword, or `other`. */
const OPERATIONS: ReadonlySet<string> = new Set([
  "select", "insert", "update", "delete", "with", "begin", "commit", "rollback", "savepoint", "release",
  "lock", "create", "alter", "drop", "listen", "unlisten", "notify", "set", "show", "copy", "truncate"
])

export const operationOf = (text: string): string => {
  // Skip leading whitespace, `--` line comments and `/* */` block comments.
  const body = text.replace(/^(?:\s+|--[^\n]*\n?|\/\*[\s\S]*?\*\/)*/, "")
  const keyword = /^[A-Za-z]+/.exec(body)?.[0]?.toLowerCase() ?? ""
  return OPERATIONS.has(keyword) ? keyword : "other"
}

/** Readable SQLSTATE names for the errors this service meets; others keep their code. */
const SQLSTATE: Readonly<Record<string, string>> = {
  "23505": "unique_violation",
  "23503": "foreign_key_violation",
  "23502": "not_null_violation",
  "23514": "check_violation",
  "22P02": "invalid_text_representation",
  "40001": "serialization_failure",
  "40P01": "deadlock_detected",
  "42P01": "undefined_table",
  "42601": "syntax_error",
  "55P03": "lock_not_available",
  "57014": "query_canceled",
  "57P01": "admin_shutdown"
}

export const errorTypeOf = (error: unknown): string => {
  const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined
  if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)) return SQLSTATE[code] ?? `sqlstate_${code}`
  return "connection"
}

type Callback = (err: Error | null, result?: unknown) => void

const textOf = (config: unknown): string | undefined => {
  if (typeof config === "string") return config
  if (typeof config === "object" && config !== null && "text" in config && typeof config.text === "string") return config.text
  return undefined
}

const INSTRUMENTED = Symbol.for("author-directory/db-instrumented")

/** SQLSTATE 0A000 "cached plan must not change result type": a migration changed a prepared statement's table. */
const PLAN_INVALIDATED = "0A000"

/**
 * Parameterised statements run as named prepared statements: PostgreSQL parses and plans each
 * once per connection instead of once per execution (W1's page statement: 344 → 277 µs of backend
 * CPU). Names are per process, one per distinct text; long texts (the audit writer's multi-row
 * INSERTs, whose row count varies) and anything past `max` distinct texts stay unnamed, so every
 * backend holds a bounded set. A statement whose plan a schema change invalidated (a migration
 * by another instance) is run again unnamed, and stays unnamed.
 */
export const makeStatementNames = (max = 200, maxTextLength = 2000) => {
  const names = new Map<string, string | null>()
  return {
    nameOf: (text: string): string | undefined => {
      const known = names.get(text)
      if (known !== undefined) return known ?? undefined
      if (text.length > maxTextLength || names.size >= max) return undefined
      const name = `ads_${names.size + 1}`
      names.set(text, name)
      return name
    },
    invalidated: (text: string) => void names.set(text, null)
  }
}

type StatementNames = ReturnType<typeof makeStatementNames>

/** Wraps `client.query` so each statement is timed, its failures counted, and, with parameters, prepared. */
const instrumentClient = (client: pg.PoolClient, statements: StatementNames | undefined) => {
  const tagged = client as pg.PoolClient & { [INSTRUMENTED]?: true }
  if (tagged[INSTRUMENTED]) return
  tagged[INSTRUMENTED] = true
  const original = client.query.bind(client) as (...args: Array<unknown>) => unknown
  const replacement = (...args: Array<unknown>): unknown => {
    const text = textOf(args[0])
    // Streaming cursors (submittables) and unknown shapes pass through untimed.
    if (text === undefined) return original(...args)
    const operation = operationOf(text)
    const started = performance.now()
    const last = args.length - 1
    const callback = args[last]
    // (text, values, callback), as @effect/sql-pg calls it: prepared when it has parameters.
    const name = statements !== undefined && typeof args[0] === "string" && Array.isArray(args[1]) && args[1].length > 0 && args.length === 3
      ? statements.nameOf(text)
      : undefined
    const finish = (error: unknown) => {
      dbQueryDuration.observe({ operation }, (performance.now() - started) / 1000)
      if (error) dbErrorsTotal.inc({ operation, error_type: errorTypeOf(error) })
    }
    if (typeof callback === "function") {
      const wrapped: Callback = (err, result) => {
        finish(err)
        ;(callback as Callback)(err, result)
      }
      if (name === undefined) return original(...args.slice(0, last), wrapped)
      return original({ name, text, values: args[1] }, (err: Error | null, result?: unknown) => {
        // A schema change invalidated the prepared plan: unnamed from now on, and run again as such
        // (inside a transaction the retry fails too, and that error is the one reported).
        if ((err as { code?: unknown } | null)?.code !== PLAN_INVALIDATED) return wrapped(err, result)
        statements!.invalidated(text)
        original(text, args[1], wrapped)
      })
    }
    const result = original(...args)
    if (result instanceof Promise) {
      result.then(() => finish(null), (error: unknown) => finish(error))
    }
    return result
  }
  ;(client as unknown as { query: typeof replacement }).query = replacement
}

/**
 * Instruments a pool: connections checked out are `db_connections_active`; every client it creates
 * has its statements timed (and, with `prepare`, prepared: `makeStatementNames`); a failure to
 * obtain a connection counts as a `connect` error.
 */
export const instrumentPool = (pool: pg.Pool, options: { readonly prepare: boolean }): pg.Pool => {
  const statements = options.prepare ? makeStatementNames() : undefined
  pool.on("connect", (client) => instrumentClient(client, statements))
  pool.on("acquire", () => dbConnectionsActive.inc())
  pool.on("release", () => dbConnectionsActive.dec())
  const connect = pool.connect.bind(pool) as (...args: Array<unknown>) => unknown
  ;(pool as unknown as { connect: (...args: Array<unknown>) => unknown }).connect = (...args: Array<unknown>) => {
    const callback = args[0]
    if (typeof callback === "function") {
      return connect((err: Error | undefined, client: unknown, done: unknown) => {
        if (err) dbErrorsTotal.inc({ operation: "connect", error_type: errorTypeOf(err) })
        ;(callback as (...a: Array<unknown>) => void)(err, client, done)
      })
    }
    const result = connect()
    if (result instanceof Promise) {
      result.catch((error: unknown) => dbErrorsTotal.inc({ operation: "connect", error_type: errorTypeOf(error) }))
    }
    return result
  }
  return pool
}
