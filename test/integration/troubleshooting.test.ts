/**
 * docs/troubleshooting.md against the code: every FATAL line the service can write is on the page,
 * and every line the page lists is one the service writes; every WebSocket close the server
 * initiates has its row; the log lines the page quotes are the code's.
 *
 * The FATAL lines are produced by the code itself, not copied: the configuration read from a table
 * of bad environments, the built-in identity provider in production and with bad users files, the
 * database layer against a closed port and a migration the database refuses, start-up's wait for a
 * database with STARTUP_TIMEOUT_SECONDS=1, the HTTP server on a taken port and an address the
 * machine does not have, and main.ts's own messages (Startup.ts builds them). Each is wrapped as
 * main.ts wraps it before it writes the line. The table of bad environments is complete: every
 * refusal written in src/Config.ts and src/Config/ (and the CIDR parser they use) must be among the messages.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { ConfigProvider, Effect, Exit, Layer, Logger, Redacted } from "effect"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeBuiltinProvider } from "../../src/Auth/BuiltinProvider.ts"
import { AppConfig, appConfig } from "../../src/Config.ts"
import { Database } from "../../src/Db/Database.ts"
import { runMigrations } from "../../src/Db/Migrator.ts"
import { NodeServer } from "../../src/Http/NodeServer.ts"
import { lockDataDir } from "../../src/Db/DataDirLock.ts"
import { crashMessage, exitReason, failedMessage, migrationsFailedMessage, overdueMessage, untilDatabaseReachable } from "../../src/Startup.ts"
import { Close } from "../../src/Ws/Protocol.ts"
import { startDatabaseServer } from "../support/DatabaseServer.ts"
import { freePort } from "../support/Ports.ts"

const ROOT = process.cwd()
const PAGE = readFileSync(join(ROOT, "docs/troubleshooting.md"), "utf8")

/** The cells of the first table after `heading`, header row left out; `\|` inside a cell is a `|`. */
const tableAfter = (heading: string): Array<Array<string>> => {
  const at = PAGE.indexOf(`\n${heading}\n`)
  if (at < 0) throw new Error(`docs/troubleshooting.md has no heading ${heading}`)
  const lines = PAGE.slice(at).split("\n")
  const rows: Array<Array<string>> = []
  for (const line of lines.slice(lines.findIndex((l) => l.startsWith("|")))) {
    if (!line.startsWith("|")) break
    if (/^\|[-|\s]+\|$/.test(line)) continue
    rows.push(line.slice(1, -1).split(/(?<!\\)\|/).map((cell) => cell.trim().replaceAll("\\|", "|")))
  }
  return rows.slice(1)
}

const spans = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/** A line as the page writes it: `<NAME>` a variable's name, any other `<…>` a value, `…` the rest. */
const templateRegex = (template: string) =>
  new RegExp(`^${
    template.split(/(<[^>]+>|…)/).map((part) =>
      part === "<NAME>" ? "[A-Z][A-Z0-9_]*" : part === "…" ? ".*" : /^<[^>]+>$/.test(part) ? ".+" : escape(part)
    ).join("")
  }$`)

const env = (vars: Record<string, string>) => Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: vars }))

/** What stopped `effect`, as main.ts words it before the service is ready. */
const failedStart = async (effect: Effect.Effect<unknown, unknown>): Promise<string> => {
  const exit = await Effect.runPromiseExit(effect.pipe(Effect.provide(Logger.layer([]))))
  if (Exit.isSuccess(exit)) throw new Error("expected a failure, and it succeeded")
  return failedMessage(false, exitReason(exit.cause).message)
}

/** One bad environment per refusal (and per wording of Effect's own checks). */
const BAD_ENVIRONMENTS: ReadonlyArray<Record<string, string>> = [
  { PORT: "abc" },
  { PORT: "70000" },
  { RATE_LIMIT_PER_MINUTE: "1.5" },
  { APP_ENV: "staging" },
  { RATE_LIMIT_FAIL_MODE: "maybe" },
  { REDIS_TLS: "maybe" },
  { LOG_LEVEL: "loud" },
  { RATE_LIMIT_PER_MINUTE: "-5" },
  { RATE_LIMIT_BURST: "-1" },
  { ADMIN_PORT: "70000" },
  { ADMIN_PORT: "8000" },
  { TRUSTED_PROXIES: "10.0.0.0/8,300.1.1.1/8" },
  { ALLOWED_WS_ORIGINS: "[1, 2" },
  { REDIS_CLUSTER_NODES: "10.0.0.1:6379,10.0.0.2" },
  { REDIS_URL: "redis://:secret@10.0.0.9:6379/0", REDIS_SENTINELS: "10.0.0.1:26379" },
  { APP_ENV: "production" },
  { NODE_ENV: "production" },
  { DATABASE_URL: "mysql://authors@db.example/authors" },
  { OIDC_ISSUER_URL: "idp.example/realms/x" },
  { APP_ENV: "production", DATABASE_URL: "postgres://a@db.example/a", OIDC_ISSUER_URL: "http://idp.example/realms/x" },
  { NODE_ENV: "production", DATABASE_URL: "postgres://a@db.example/a", OIDC_ISSUER_URL: "http://idp.example/realms/x" }
]

/** The refusals src/Config.ts and src/Config/ write (and the CIDR parser's), comments left out, `${…}` standing for anything. */
const refusalsInSource = (): ReadonlyArray<string> => {
  const config = readdirSync(join(ROOT, "src/Config")).map((file) => `src/Config/${file}`)
  const source = ["src/Config.ts", ...config, "src/Domain/Cidr.ts"]
    .map((file) => readFileSync(join(ROOT, file), "utf8").replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, ""))
    .join("\n")
  const literals = [...source.matchAll(/"((?:[^"\\\n]|\\.)*)"|`((?:[^`\\]|\\.)*)`/g)].map((m) => m[1] ?? m[2]!)
  return literals.filter((text) => /\bmust be\b|\bSet only one\b|\binvalid CIDR\b/.test(text))
}

describe("docs/troubleshooting.md: every FATAL line", () => {
  const messages: Array<string> = []
  let blocker: Server
  let dataDir: string

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "ads-troubleshooting-"))
    blocker = createServer()
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve))
    const taken = (blocker.address() as { port: number }).port
    const closed = Redacted.make(`postgres://authors@127.0.0.1:${await freePort()}/authors`)
    const notUsers = join(dataDir, "users.json")
    writeFileSync(notUsers, JSON.stringify([{ username: "admin", roles: [] }]))
    // A migration the database refuses, alone in its directory (on a database migrated before, as
    // the embedded template is, the others would be skipped anyway).
    const migrationsDir = join(dataDir, "migrations")
    mkdirSync(migrationsDir)
    writeFileSync(join(migrationsDir, "9999_needs_an_extension.sql"), "CREATE EXTENSION no_such_extension;\n")
    const refusing = await startDatabaseServer()
    const config = (vars: Record<string, string>) => Layer.provide(AppConfig.layer, Layer.succeed(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: vars })))
    try {
      for (const vars of BAD_ENVIRONMENTS) messages.push(await failedStart(appConfig.pipe(env(vars))))
      for (const vars of [
        { APP_ENV: "production", DATABASE_URL: "postgres://a@db.example/a" },
        { NODE_ENV: "production", DATABASE_URL: "postgres://a@db.example/a" },
        { AUTH_USERS_FILE: join(dataDir, "no-such-users.json") },
        { AUTH_USERS_FILE: notUsers }
      ]) {
        messages.push(await failedStart(makeBuiltinProvider.pipe(Effect.provide(config({ DATA_DIR: dataDir, ...vars })))))
      }
      messages.push(await failedStart(Effect.scoped(Layer.build(Database.layer(closed, 1)))))
      messages.push(await failedStart(Effect.scoped(Layer.build(Layer.effectDiscard(runMigrations("migrations")).pipe(Layer.provide(PgClient.layer({ url: closed })))))))
      messages.push(await failedStart(Effect.scoped(Layer.build(Database.layer(Redacted.make(refusing.url), 1, { migrationsDir })))))
      messages.push(await failedStart(Effect.scoped(Layer.build(untilDatabaseReachable(Database.layer(closed, 1)).pipe(Layer.provide(config({ STARTUP_TIMEOUT_SECONDS: "1" })))))))
      // An embedded database another process holds (here this one: its lock is taken twice), as the
      // service and `npm run migrate` word it.
      const locked = await failedStart(Effect.scoped(Effect.andThen(lockDataDir(join(dataDir, "pgdata")), lockDataDir(join(dataDir, "pgdata")))))
      messages.push(locked, migrationsFailedMessage(locked.slice(failedMessage(false, "").length)))
      for (const options of [{ port: taken, host: "127.0.0.1" }, { port: 0, host: "127.0.0.1", adminPort: taken }, { port: 0, host: "192.0.2.1" }]) {
        messages.push(await failedStart(Effect.scoped(Layer.build(NodeServer.layer(options)))))
      }
    } finally {
      await refusing.close()
    }
    // main.ts's own lines: a failure after the service was ready, a bug, the shutdown's backstop.
    const deadlineMs = Number(/const SHUTDOWN_DEADLINE_MS = ([\d_]+)/.exec(readFileSync(join(ROOT, "src/main.ts"), "utf8"))![1]!.replaceAll("_", ""))
    messages.push(failedMessage(true, "the connection pool was closed"))
    for (const ready of [false, true]) {
      for (const event of ["uncaughtException", "unhandledRejection"] as const) messages.push(crashMessage(ready, event, new Error("boom")))
    }
    for (const signal of ["SIGTERM", "SIGINT"]) messages.push(overdueMessage(signal, deadlineMs))
  })

  afterAll(async () => {
    await new Promise((resolve) => blocker?.close(resolve))
    if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true })
  })

  const rows = () => tableAfter("### Fatal lines")
  const isLine = (text: string) => /^(Service failed|Shutdown did not finish|Migrations not applied)/.test(text)
  const templates = () => rows().flatMap((row) => spans(row[0]!).filter(isLine))

  it("every line the code writes is on the page", () => {
    expect(messages.length).toBeGreaterThan(BAD_ENVIRONMENTS.length)
    const missing = messages.filter((message) => !templates().some((template) => templateRegex(template).test(message)))
    expect(missing).toEqual([])
  })

  it("every line on the page is one the code writes, and every example in the first column is part of one", () => {
    expect(templates().filter((template) => !messages.some((message) => templateRegex(template).test(message)))).toEqual([])
    const examples = rows().flatMap((row) => spans(row[0]!).filter((text) => !isLine(text)))
    expect(examples.filter((example) => !messages.some((message) => message.includes(example)))).toEqual([])
  })

  it("the bad environments cover every refusal src/Config.ts and src/Config/ write", () => {
    const refusals = refusalsInSource()
    expect(refusals.length).toBeGreaterThan(5)
    const uncovered = refusals.filter((literal) => {
      const pattern = new RegExp(literal.split(/\$\{(?:[^{}]|\{[^{}]*\})*\}/).map(escape).join(".*"))
      return !messages.some((message) => pattern.test(message))
    })
    expect(uncovered).toEqual([])
  })
})

describe("docs/troubleshooting.md: every WebSocket close", () => {
  it("the table has every close the server initiates, and only those besides the two a client sees without it", () => {
    const rows = tableAfter("## WebSocket closes").map((row) => `${row[0]} ${/^`([^`]*)`$/.exec(row[1]!)?.[1] ?? ""}`)
    for (const close of Object.values(Close)) expect(rows, `${close.code} ${close.reason}`).toContain(`${close.code} ${close.reason}`)
    const initiated = new Set(Object.values(Close).map((close) => `${close.code} ${close.reason}`))
    expect(rows.filter((row) => !initiated.has(row))).toEqual(["1006 ", "1007 "])
  })
})

describe("docs/troubleshooting.md: the log lines it quotes", () => {
  /** As the page writes them (`<…>` a value, `…` the rest); each is the code's words. */
  const QUOTED = [
    "Identity provider <issuer URL>: signing keys fetched",
    "OIDC discovery failed with status <status>",
    "JWKS fetch failed with status <code>",
    "the token endpoint answered <status> with a body that is not JSON",
    "the token endpoint answered <status> without an access token",
    "Database not reachable yet (attempt <n>): …",
    "Redis SUBSCRIBE failed; retried when the connection is back",
    "Read cache bypassed: LISTEN for committed writes is not established; retrying",
    "WebSocket session expiry: this instance's timers (Redis refuses CONFIG, as managed Redis services do; sessions end on time all the same). Redis said: …",
    "WebSocket session expiry: this instance's timers until Redis answers (key-expiry events could not be checked)",
    "WebSocket session expiry: this instance's timers (a Redis Cluster …",
    "WebSocket session expiry: this instance's timers (Redis refuses SUBSCRIBE to …",
    "Audit batch not written; retrying until the database is back"
  ]

  /** Every module of src/, its literals joined where they are concatenated (`"a " + "b"`). */
  const source = () => {
    const files: Array<string> = []
    const walk = (dir: string): void => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        if (entry.isDirectory()) walk(join(dir, entry.name))
        else if (entry.name.endsWith(".ts")) files.push(readFileSync(join(dir, entry.name), "utf8"))
      }
    }
    walk(join(ROOT, "src"))
    return files.join("\n").replace(/["`]\s*\+\s*["`]/g, "")
  }

  it("each is on the page and in the code", () => {
    const page = PAGE.replace(/\s+/g, " ")
    const code = source()
    for (const quote of QUOTED) {
      expect(page, quote).toContain(`\`${quote}`)
      const pattern = new RegExp(quote.split(/<[^>]+>|…/).map(escape).join("[^\\n]*?"))
      expect(pattern.test(code), quote).toBe(true)
    }
  })
})
