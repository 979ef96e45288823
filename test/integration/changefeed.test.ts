/**
 * The feed of committed writes (src/Authors/ChangeFeed.ts) on real PostgreSQL, through a proxy the
 * test can black-hole: it says when it listens, delivers what the trigger notifies, says `down`
 * within the heartbeat's bound when the connection silently stops delivering (the read cache then
 * bypasses itself), and listens again once the connection is back (the cache then flushes). The
 * triggers (migrations/0007) notify every session's writes, the service's own name included, with
 * what each statement did.
 */
import { Effect, Exit, Fiber, Layer, Redacted, Scope } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HEARTBEAT_EVERY_MS, HEARTBEAT_TIMEOUT_MS, runChangeFeed } from "../../src/Authors/ChangeFeed.ts"
import { APPLICATION_NAME, Database } from "../../src/Db/Database.ts"
import { eventually } from "../support/Eventually.ts"
import { proxiedDatabase } from "../support/DatabaseServer.ts"
import { type Cleanups, runCleanups } from "../support/Launcher.ts"
import { type TcpProxy, viaProxy } from "../support/TcpProxy.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

describe.runIf(TEST_DATABASE_URL !== undefined)("the LISTEN feed of outside writes", () => {
  let db: TestDatabase
  let proxy: TcpProxy
  const cleanups: Cleanups = []
  beforeAll(async () => void ({ db, proxy } = await proxiedDatabase(cleanups)))
  afterAll(() => runCleanups(cleanups))

  it("up, notifications delivered, down within the heartbeat's bound when black-holed, up again when back", async () => {
    const events: Array<string> = []
    const fiber = Effect.runFork(runChangeFeed({ url: Redacted.make(viaProxy(db.url!, proxy)), keepAlive: "10 seconds" }, {
      up: () => void events.push("up"),
      down: () => void events.push("down"),
      changed: (payload) => void events.push(`changed ${payload}`)
    }))
    const client = new pg.Client({ connectionString: db.url })
    await client.connect()
    try {
      await eventually(() => events.includes("up"), "the feed to listen")
      await client.query("SELECT pg_notify('authors_changed', '7,8')")
      await eventually(() => events.includes("changed 7,8"), "the notification")

      // No error ever comes from a black hole: only the heartbeat notices (within its period plus its deadline).
      proxy.blackhole()
      await eventually(() => events.includes("down"), `the feed to say down (heartbeat ${HEARTBEAT_EVERY_MS} + ${HEARTBEAT_TIMEOUT_MS} ms)`)

      await proxy.restore()
      await eventually(() => events.lastIndexOf("up") > events.indexOf("down"), "the feed to listen again")
      await client.query("SELECT pg_notify('authors_changed', 'all')")
      await eventually(() => events.includes("changed all"), "a notification after the reconnection")
      expect(events.slice(0, 3)).toEqual(["up", "changed 7,8", "down"])
      expect(events.filter((e) => e === "up").length).toBeGreaterThanOrEqual(2)
    } finally {
      await client.end()
      await Effect.runPromise(Fiber.interrupt(fiber))
    }
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("the triggers of committed writes", () => {
  it("notify every session's writes, the service's own included, with each statement's kind and ids (`all` past 100 ids and for TRUNCATE)", async () => {
    const db = await createPostgresDatabase(TEST_DATABASE_URL!)
    const scope = Effect.runSync(Scope.make())
    const payloads: Array<string> = []
    const client = new pg.Client({ connectionString: db.url, application_name: APPLICATION_NAME })
    try {
      await Effect.runPromise(Scope.provide(Layer.build(Database.layer(Redacted.make(db.url!), 1)), scope)) // the migrations
      let up = false
      const fiber = Effect.runFork(runChangeFeed({ url: Redacted.make(db.url!) }, {
        up: () => void (up = true),
        down: () => {},
        changed: (payload) => void payloads.push(payload)
      }))
      await eventually(() => up, "the feed to listen")
      await client.connect()
      const id = Number((await client.query<{ id: string }>("INSERT INTO authors (name) VALUES ('Feed') RETURNING id")).rows[0]!.id)
      await client.query("UPDATE authors SET name = 'Feed renamed' WHERE id = $1", [id])
      await client.query("DELETE FROM authors WHERE id = $1", [id])
      await client.query("INSERT INTO authors (name) SELECT 'Bulk ' || g FROM generate_series(1, 101) AS g")
      await client.query("TRUNCATE authors")
      await eventually(() => payloads.length === 5, "five notifications")
      expect(payloads).toEqual([`c:${id}`, `u:${id}`, `d:${id}`, "all", "all"])
      await Effect.runPromise(Fiber.interrupt(fiber))
    } finally {
      await client.end()
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await db.dispose()
    }
  })
})
