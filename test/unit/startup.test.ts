/**
 * Start-up's decisions as units (src/Startup.ts): which database failures are worth another attempt
 * (the server not reachable yet) and which stop start-up at once (a wrong password, a missing
 * database, a bad URL); how a failure reads as one line; when that line is JSON.
 */
import { Cause, ConfigProvider, Effect, Exit } from "effect"
import * as SqlError from "effect/sql/SqlError"
import { describe, expect, it } from "vitest"
import { appConfig } from "../../src/Config.ts"
import { databaseTimeout } from "../../src/Db/Deadline.ts"
import { errorText } from "../../src/Observability/Logging.ts"
import { isUnreachable } from "../../src/Db/Failures.ts"
import { DatabaseUnreachable, exitReason, failureLine } from "../../src/Startup.ts"

const connectionError = (cause: unknown, message = "PgConnection: Failed to connect") =>
  new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause, message, operation: "connect" }) })

/** As the driver builds a server's ErrorResponse: the fields on an Error. */
const serverError = (code: string, message: string) => Object.assign(new Error(message), { code })

const socketError = (code: string, message: string) => Object.assign(new Error(message), { code })

describe("isUnreachable: what start-up waits for", () => {
  it.each([
    ["refused", connectionError(socketError("ECONNREFUSED", "connect ECONNREFUSED 10.0.0.5:5432"))],
    ["name not resolving yet", connectionError(socketError("ENOTFOUND", "getaddrinfo ENOTFOUND postgres"))],
    ["DNS try again", connectionError(socketError("EAI_AGAIN", "getaddrinfo EAI_AGAIN postgres"))],
    ["reset", connectionError(socketError("ECONNRESET", "read ECONNRESET"))],
    ["connect timeout", connectionError(new Error("Connection timed out"), "PgConnection: Connection timed out")],
    ["closed during start-up", connectionError(new Error("Connection closed unexpectedly"), "PgConnection: Connection closed during startup")],
    ["the service's own connect deadline", databaseTimeout("acquire", 5000)],
    ["server starting up (57P03)", new SqlError.SqlError({ reason: new SqlError.UnknownError({ cause: serverError("57P03", "the database system is starting up"), message: "PgConnection: Failed to connect", operation: "connect" }) })],
    ["too many connections (53300)", new SqlError.SqlError({ reason: new SqlError.UnknownError({ cause: serverError("53300", "sorry, too many clients already"), message: "x", operation: "connect" }) })]
  ])("%s → retried", (_, error) => {
    expect(isUnreachable(error)).toBe(true)
  })

  it.each([
    ["wrong password (28P01)", new SqlError.SqlError({ reason: new SqlError.AuthenticationError({ cause: serverError("28P01", "password authentication failed for user \"authors\""), message: "PgConnection: Failed to connect", operation: "connect" }) })],
    ["missing database (3D000)", new SqlError.SqlError({ reason: new SqlError.UnknownError({ cause: serverError("3D000", "database \"authors\" does not exist"), message: "PgConnection: Failed to connect", operation: "connect" }) })],
    ["bad URL", connectionError(Object.assign(new TypeError("Invalid URL"), { code: "ERR_INVALID_URL" }), "PgConnection: Invalid connection URL")],
    ["a migration's SQL error (42601)", new SqlError.SqlError({ reason: new SqlError.SqlSyntaxError({ cause: serverError("42601", "syntax error"), message: "x", operation: "query" }) })],
    ["a defect", new Error("boom")]
  ])("%s → not retried", (_, error) => {
    expect(isUnreachable(error)).toBe(false)
  })
})

describe("errorText / exitReason: one line naming the cause", () => {
  it("a driver error: its message and its causes', repeats left out", () => {
    expect(errorText(connectionError(socketError("ECONNREFUSED", "connect ECONNREFUSED 10.0.0.5:5432"))))
      .toBe("PgConnection: Failed to connect: connect ECONNREFUSED 10.0.0.5:5432")
  })

  it("a configuration error: NAME: what is wrong, on one line", async () => {
    const exit = await Effect.runPromiseExit(appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: { PORT: "abc" } }))))
    expect(Exit.isFailure(exit) ? exitReason(exit.cause) : "started").toEqual({ message: "PORT: Expected a string representing a finite number" })
    const own = await Effect.runPromiseExit(appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: { RATE_LIMIT_PER_MINUTE: "-5" } }))))
    expect(Exit.isFailure(own) ? exitReason(own.cause) : "started").toEqual({ message: "RATE_LIMIT_PER_MINUTE must be a positive integer" })
  })

  it("a cause with several failures and an interruption: the failures, joined", () => {
    const cause = Cause.combine(Cause.combine(Cause.fail(new Error("first")), Cause.die(new Error("second"))), Cause.interrupt())
    expect(exitReason(cause)).toEqual({ message: "first; second" })
  })

  it("what stopped it is the message; the dependency's own words behind it are the cause, without the URL's password", () => {
    const unreachable = new DatabaseUnreachable({
      message: "The database could not be reached within STARTUP_TIMEOUT_SECONDS=2 (3 attempts)",
      cause: connectionError(socketError("ECONNREFUSED", "connect ECONNREFUSED 10.0.0.5:5432 (postgres://authors:pw-123@10.0.0.5/authors)"))
    })
    expect(exitReason(Cause.fail(unreachable))).toEqual({
      message: "The database could not be reached within STARTUP_TIMEOUT_SECONDS=2 (3 attempts)",
      cause: "PgConnection: Failed to connect: connect ECONNREFUSED 10.0.0.5:5432 (postgres://authors:[REDACTED]@10.0.0.5/authors)"
    })
  })

  it("a bug (a TypeError thrown where none was expected) keeps its stack in the cause; a deliberate refusal does not", () => {
    const bug = exitReason(Cause.die(new TypeError("Cannot read properties of undefined (reading 'client')")))
    expect(bug.message).toBe("Cannot read properties of undefined (reading 'client')")
    expect(bug.cause).toMatch(/^TypeError: Cannot read properties of undefined \(reading 'client'\)\n\s+at /)
    expect(exitReason(Cause.die(new Error("The built-in identity provider is for development only")))).toEqual({
      message: "The built-in identity provider is for development only"
    })
  })

  it("credentials in a message are redacted", () => {
    expect(errorText(new Error("rejected Bearer abc.def.ghi"))).toBe("rejected Bearer [REDACTED]")
  })
})

describe("failureLine: JSON in production or with LOG_FORMAT=json, else pretty; always one line", () => {
  const now = new Date("2026-11-25T12:00:00.000Z")
  it.each([
    [{ LOG_FORMAT: "json" }, true],
    [{ APP_ENV: "production" }, true],
    [{ APP_ENV: "production", LOG_FORMAT: "pretty" }, false],
    [{ APP_ENV: "production", LOG_FORMAT: "loud" }, true],
    [{ NODE_ENV: "production" }, true],
    [{ NODE_ENV: "production", APP_ENV: "development" }, false],
    [{ NODE_ENV: "development" }, false],
    [{}, false]
  ])("%o → JSON: %s", (env, json) => {
    const line = failureLine(env, { message: "Service failed to start: x", cause: "y\n  at z" }, now)
    expect(line.includes("\n")).toBe(false)
    if (json) expect(JSON.parse(line)).toEqual({ timestamp: now.toISOString(), level: "FATAL", message: "Service failed to start: x", cause: "y\n  at z" })
    else expect(line).toBe("[2026-11-25T12:00:00.000Z] FATAL Service failed to start: x (y at z)")
    const bare = failureLine(env, { message: "Service failed to start: x" }, now)
    if (json) expect(JSON.parse(bare)).toEqual({ timestamp: now.toISOString(), level: "FATAL", message: "Service failed to start: x" })
  })
})
