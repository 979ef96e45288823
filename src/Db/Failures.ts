/**
 * Which failures of a database call are the database's — down, unreachable, starting or shutting
 * down, too slow, refusing connections — rather than the statement's (a constraint, a bug): what
 * start-up waits for (Startup.ts) and what a request's failure reports as an outage rather than a
 * bug (docs/operations.md#outages).
 */
import { Effect } from "effect"
import * as SqlError from "effect/sql/SqlError"
import { causeChain } from "../Observability/Logging.ts"
import { Outages } from "../Observability/Outages.ts"
import { isDatabaseTimeout } from "./Deadline.ts"

const codeOf = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "code" in error && typeof error.code === "string" ? error.code : undefined

/** A socket error (ECONNREFUSED, ENOTFOUND, EAI_AGAIN, ETIMEDOUT, EHOSTUNREACH, ECONNRESET, …); not ERR_* (a bad URL, a TLS setting). */
const SOCKET_ERROR = /^E(?!RR_)[A-Z_]+$/

/**
 * SQLSTATEs of a server that will take connections again: 08 connection exceptions, 53300 too
 * many connections, 57P01–57P03 shutting down or starting up ("the database system is starting up").
 */
const isTransientSqlState = (code: string) => code.startsWith("08") || code === "53300" || /^57P0[123]$/.test(code)

/** The driver's own words for a server that accepted and then went away or never answered. */
const TRANSIENT_MESSAGES = new Set(["Connection timed out", "Connection closed unexpectedly"])

/** Whether the database cannot be reached (yet): at start, worth another attempt. */
export const isUnreachable = (error: unknown): boolean =>
  causeChain(error).some((e) => {
    if (isDatabaseTimeout(e)) return true
    const code = codeOf(e)
    if (code !== undefined && (SOCKET_ERROR.test(code) || isTransientSqlState(code))) return true
    return e instanceof Error && TRANSIENT_MESSAGES.has(e.message)
  })

/** Reasons of a `SqlError` that say the database failed, not the statement. */
const DATABASE_REASONS = new Set(["ConnectionError", "StatementTimeoutError", "AuthenticationError"])

/**
 * Whether a call failed because the database did (docs/operations.md#outages): unreachable, the
 * connection lost or refused, no answer within the deadline, a statement cancelled for its time, the
 * credentials refused. A request that fails so is an outage to report once, not a bug to log with
 * its stack.
 */
export const isDatabaseFailure = (error: unknown): boolean =>
  isUnreachable(error) || causeChain(error).some((e) => SqlError.isSqlError(e) && DATABASE_REASONS.has(e.reason._tag))

/**
 * What a caller does with a call's failure (docs/operations.md#outages): the database's is reported
 * to the outage tracker — one WARN when an outage begins, counted after — and any other is
 * `otherwise` (a bug's ERROR line, with its stack).
 */
export const reportDatabaseFailure = (error: unknown, operation: string, otherwise: Effect.Effect<void>): Effect.Effect<void> =>
  isDatabaseFailure(error) ? Effect.flatMap(Effect.service(Outages), (outages) => outages.failed("database", error, operation)) : otherwise

/**
 * Whether a statement certainly did not commit: the server refused it with an ERROR (not FATAL)
 * and the session went on (the driver reports a server's error only once the server is ready for
 * the next statement), so its transaction was rolled back. Anything else — the connection lost, no
 * answer within the deadline, a FATAL error — leaves its outcome unknown.
 */
export const isRefusedStatement = (error: unknown): boolean => {
  if (!SqlError.isSqlError(error)) return false
  const cause: unknown = error.reason.cause
  if (typeof cause !== "object" || cause === null) return false
  const severity = "severityUnlocalized" in cause && typeof cause.severityUnlocalized === "string"
    ? cause.severityUnlocalized
    : "severity" in cause && typeof cause.severity === "string"
    ? cause.severity
    : undefined
  return severity === "ERROR"
}
