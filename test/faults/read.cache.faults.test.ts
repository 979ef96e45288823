/**
 * The read cache under faults, through real processes (docs/architecture.md#the-read-cache): two
 * instances on one PostgreSQL and one private Redis, each read made first (so a stale answer would
 * be cached), then the fault, then the reads again until they reflect what the database holds.
 * - A write whose client goes away while its statement waits on a row lock held by the test, and
 *   which commits once the lock is released (a rename, a create): both instances reflect it.
 * - Redis restarted from a snapshot taken before two answered writes: no old name, the deleted
 *   author 404, and an `If-None-Match` with an ETag from before the writes gets 200, not 304.
 * - Rows written with triggers off: the exact total is repaired (at the next instance's start),
 *   counted and logged; a write from a session using the service's `application_name` is seen.
 * - The writing instance SIGKILLed while its statement waits on the lock, the commit after the
 *   kill: the other instance reflects it.
 * - Two instances without Redis: a create on one is seen on the other.
 * Every wait is for the answer to come (`eventually`): none is a bound on how fast.
 */
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { APPLICATION_NAME } from "../../src/Db/Database.ts"
import { encodeCursor } from "../../src/Domain/Pagination.ts"
import { onPath } from "../support/Binaries.ts"
import { eventually } from "../support/Eventually.ts"
import { requestsInFlight } from "../support/Faults.ts"
import { type Cleanups, runCleanups, type Service, startService } from "../support/Launcher.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { startRedisServer, type RedisServer } from "../support/RedisServer.ts"
import { createPostgresDatabase, login, request, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"

interface Author {
  readonly id: number
  readonly name: string
}
interface Page {
  readonly items: ReadonlyArray<Author>
  readonly meta: { readonly total: number }
}

/** An instance and its admin token. */
interface Instance {
  readonly service: Service
  readonly url: string
  readonly token: string
}

const started = async (env: Record<string, string | undefined>, cleanups: Cleanups): Promise<Instance> => {
  const service = await startService({ env, cleanups })
  return { service, url: service.url, token: (await login(service, "admin")).access_token }
}

const get = async (at: Instance, path: string, headers: Record<string, string> = {}) => {
  const res = await request(at, "GET", path, { token: at.token, headers })
  if (res.status !== 200 && res.status !== 404 && res.status !== 304) throw new Error(`GET ${path}: ${res.status} ${JSON.stringify(res.body)}`)
  return res
}
/** What the instance answers about author `id` by every kind of read: by id, by name, in pages. */
const readsOf = async (at: Instance, id: number, name: string) => {
  const byId = await get(at, `/authors/${id}`)
  const byName = (await get(at, `/authors?name=${encodeURIComponent(name)}`)).body as ReadonlyArray<Author>
  const aroundIt = (await get(at, `/authors/paginated?per_page=1&cursor=${encodeCursor(id - 1)}`)).body as Page
  const firstPage = (await get(at, "/authors/paginated?page=1&per_page=20")).body as Page
  return {
    byId: byId.status === 404 ? undefined : (byId.body as Author).name,
    byName: byName.map((a) => a.id),
    aroundIt: aroundIt.items.find((a) => a.id === id)?.name,
    firstPage: firstPage.items.find((a) => a.id === id)?.name,
    total: firstPage.meta.total
  }
}

const serviceEnv = (db: TestDatabase, redis: RedisServer | undefined, prefix: string) => ({
  DATABASE_URL: db.url,
  REDIS_URL: redis?.url,
  REDIS_KEY_PREFIX: prefix,
  RATE_LIMIT_PER_MINUTE: "1000000",
  // A statement may wait on the test's lock as long as the test takes.
  DATABASE_STATEMENT_TIMEOUT_SECONDS: "600",
  LOG_LEVEL: "warn"
})

const sql = async (url: string, options: { readonly applicationName?: string } = {}) => {
  const client = new pg.Client({ connectionString: url, ...(options.applicationName !== undefined ? { application_name: options.applicationName } : {}) })
  await client.connect()
  return client
}

/** What the database holds about author `id` and the total it keeps (`author_stats`) against count(*). */
const databaseOf = async (client: pg.Client, id: number) => ({
  name: (await client.query<{ name: string }>("SELECT name FROM authors WHERE id = $1", [id])).rows[0]?.name,
  kept: Number((await client.query<{ total: string }>("SELECT total FROM author_stats")).rows[0]!.total),
  counted: Number((await client.query<{ n: string }>("SELECT count(*) AS n FROM authors")).rows[0]!.n)
})

/** Statements of the service waiting on a lock, whose text starts with `prefix`. */
const waitingOnLock = async (client: pg.Client, prefix: string) =>
  Number((await client.query<{ n: string }>(
    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = $1 AND query LIKE $2",
    [APPLICATION_NAME, `${prefix}%`]
  )).rows[0]!.n)

/** Sends a write to `at`; resolves once its statement waits on the test's lock, with its outcome to come. */
const writeWaitingOnLock = async (at: Instance, probe: pg.Client, method: "PUT" | "POST", path: string, name: string, statement: string) => {
  const controller = new AbortController()
  const sent = fetch(`${at.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${at.token}`, "content-type": "application/json" },
    body: JSON.stringify({ name }),
    signal: controller.signal
  }).then(() => "answered", () => "not answered")
  await eventually(async () => (await waitingOnLock(probe, statement)) > 0, `the ${method} to wait on the test's lock`)
  return { abort: () => controller.abort(), sent }
}

/**
 * A write to `at` that goes away (the client's request is aborted) once its statement waits on the
 * test's lock. Two round trips through the instance follow, so it has seen the client go.
 */
const abandonedWrite = async (at: Instance, probe: pg.Client, method: "PUT" | "POST", path: string, name: string, statement: string) => {
  const { abort, sent } = await writeWaitingOnLock(at, probe, method, path, name, statement)
  abort()
  expect(await sent).toBe("not answered")
  await requestsInFlight(at.url)
  await requestsInFlight(at.url)
}

/** Runs `during` while the test's own transaction holds author `id`'s row, then commits. */
const holdingRow = async (url: string, id: number, during: () => Promise<void>) => {
  const holder = await sql(url)
  try {
    await holder.query("BEGIN")
    await holder.query("SELECT id FROM authors WHERE id = $1 FOR UPDATE", [id])
    await during()
    await holder.query("COMMIT")
  } finally {
    await holder.end()
  }
}

const runsHere = TEST_DATABASE_URL !== undefined && onPath("redis-server")

describe.runIf(runsHere)("two instances on one PostgreSQL and one private Redis", () => {
  const cleanups: Cleanups = []
  const prefix = `test-cache-faults-${randomUUID()}:`
  let db: TestDatabase
  let redis: RedisServer
  let redisDir: string
  let a: Instance
  let b: Instance
  let probe: pg.Client

  beforeAll(async () => {
    db = await createPostgresDatabase(TEST_DATABASE_URL!)
    cleanups.push(() => db.dispose())
    redisDir = mkdtempSync(join(tmpdir(), "ads-redis-snapshot-"))
    redis = await startRedisServer(["--dir", redisDir, "--dbfilename", "dump.rdb"])
    cleanups.push(async () => {
      await redis.kill("SIGTERM")
      rmSync(redisDir, { recursive: true, force: true })
    })
    a = await started(serviceEnv(db, redis, prefix), cleanups)
    b = await started(serviceEnv(db, redis, prefix), cleanups)
    probe = await sql(db.url!)
    cleanups.push(() => probe.end())
  })
  afterAll(() => runCleanups(cleanups))

  const create = async (at: Instance, name: string) => {
    const res = await request(at, "POST", "/authors", { token: at.token, body: { name } })
    expect(res.status).toBe(201)
    return (res.body as Author).id
  }
  /** Reads made twice on both instances: whatever they answer is cached now. */
  const warm = async (id: number, name: string) => {
    for (const at of [a, b]) for (let i = 0; i < 2; i++) await readsOf(at, id, name)
  }
  /** Every read of author `id` on `at` answers `newName`, none `oldName`, with the total the database keeps. */
  const reflected = async (at: Instance, id: number, oldName: string, newName: string) => {
    const { kept } = await databaseOf(probe, id)
    await eventually(async () => {
      const before = await readsOf(at, id, oldName)
      const after = await readsOf(at, id, newName)
      expect({ before: before.byName, ...after }).toEqual({
        before: [],
        byId: newName,
        byName: [id],
        aroundIt: newName,
        firstPage: newName,
        total: kept
      })
    }, `${at.url} to answer ${newName}`)
  }

  it("a rename whose client went away while it waited on a row lock, committed once the lock was released: both instances answer the new name", async () => {
    const oldName = `Locked ${randomUUID()}`
    const newName = `${oldName} renamed`
    const id = await create(a, oldName)
    await warm(id, oldName)
    await holdingRow(db.url!, id, () => abandonedWrite(a, probe, "PUT", `/authors/${id}`, newName, "UPDATE authors"))
    await eventually(async () => (await databaseOf(probe, id)).name === newName, "the rename to commit")
    for (const at of [a, b]) await reflected(at, id, oldName, newName)
  })

  it("a create whose client went away while it waited on the name's lock, committed once the lock was released: both instances list it", async () => {
    const name = `Locked create ${randomUUID()}`
    const other = await create(a, `Neighbour ${randomUUID()}`)
    await warm(other, name) // `?name=` cached empty, the first page and its total cached
    const holder = await sql(db.url!)
    try {
      // An uncommitted row with the same name: the service's INSERT waits for this transaction.
      await holder.query("BEGIN")
      await holder.query("INSERT INTO authors (name) VALUES ($1)", [name])
      await abandonedWrite(a, probe, "POST", "/authors", name, "INSERT INTO authors")
      await holder.query("ROLLBACK")
    } finally {
      await holder.end()
    }
    const id = await eventually(async () =>
      (await probe.query<{ id: string }>("SELECT id FROM authors WHERE name = $1", [name])).rows.map((r) => Number(r.id))[0] ?? false, "the create to commit")
    for (const at of [a, b]) await reflected(at, id, `never ${name}`, name)
  })

  it("Redis restarted from a snapshot taken before two answered writes: no old name, the deleted author 404, old ETags get 200", async () => {
    const client = new Redis(redis.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 })
    client.on("error", () => {})
    try {
      const kept = `Snapshot ${randomUUID()}`
      const keptId = await create(a, kept)
      const gone = await create(a, `Snapshot gone ${randomUUID()}`)
      const paths = [`/authors/${keptId}`, "/authors", "/authors/paginated?per_page=50"]
      const etags = new Map<string, string>()
      for (let i = 0; i < 2; i++) {
        for (const path of paths) etags.set(path, (await get(b, path)).headers.get("etag")!)
        expect((await get(b, `/authors/${gone}`)).status).toBe(200)
      }
      expect((await get(b, paths[0]!, { "if-none-match": etags.get(paths[0]!)! })).status).toBe(304)
      expect(await client.save()).toBe("OK")
      // Two answered writes on the other instance; none read on this one since.
      expect((await request(a, "PUT", `/authors/${keptId}`, { token: a.token, body: { name: `${kept} renamed` } })).status).toBe(200)
      expect((await request(a, "DELETE", `/authors/${gone}`, { token: a.token })).status).toBe(204)
      await redis.kill()
      await redis.start()
      // Its generations are back to what they were before the writes; this instance reads them again.
      await eventually(async () => ((await fetch(`${b.url}/health`)).json() as Promise<{ redis: string }>).then((h) => h.redis === "healthy"), "the instance's Redis back")
      expect(((await get(b, `/authors/${keptId}`)).body as Author).name).toBe(`${kept} renamed`)
      expect((await get(b, `/authors/${gone}`)).status).toBe(404)
      for (const path of paths) {
        const res = await get(b, path, { "if-none-match": etags.get(path)! })
        expect(res.status, path).toBe(200)
        expect(JSON.stringify(res.body), path).toContain(`${kept} renamed`)
      }
    } finally {
      client.disconnect()
    }
  })

  it("rows written with triggers off: the total is repaired, counted and logged; a write from a session named as the service is seen", async () => {
    const renamed = await create(a, `Named ${randomUUID()}`)
    const name = (await databaseOf(probe, renamed)).name!
    await warm(renamed, name)
    const replica = await sql(db.url!)
    const named = await sql(db.url!, { applicationName: APPLICATION_NAME })
    try {
      await replica.query("SET session_replication_role = replica")
      await replica.query("INSERT INTO authors (name) VALUES ($1), ($2)", [`Replica ${randomUUID()}`, `Replica ${randomUUID()}`])
      await named.query("UPDATE authors SET name = $1 WHERE id = $2", [`${name} by a namesake`, renamed])
    } finally {
      await replica.end()
      await named.end()
    }
    const drifted = await databaseOf(probe, renamed)
    expect(drifted.counted - drifted.kept).toBe(2)
    for (const at of [a, b]) await reflected(at, renamed, name, `${name} by a namesake`)

    // The check runs at start (and every 10 minutes): a third instance starting repairs it.
    const c = await started(serviceEnv(db, redis, prefix), cleanups)
    await eventually(async () => (await scrapeMetrics(c.url)).firstOrZero("author_total_repairs_total") === 1, "the repair counted")
    const repaired = await databaseOf(probe, renamed)
    expect(repaired.kept).toBe(repaired.counted)
    const warnings = c.service.logLines().filter((line) => String(line["message"]).startsWith("Author total repaired"))
    expect(warnings).toHaveLength(1)
    expect(warnings[0]).toMatchObject({ level: "WARN", message: expect.stringContaining(`said ${drifted.kept}, count(*) says ${drifted.counted} (drift 2)`) })
    for (const at of [a, b, c]) {
      await eventually(async () => ((await get(at, "/authors/paginated?per_page=1")).body as Page).meta.total === repaired.counted, `${at.url}'s total`)
    }
    await c.service.dispose()
  })

  it("the writing instance killed while its rename waits on a row lock, the rename committed after: the other instance answers the new name", async () => {
    const oldName = `Killed ${randomUUID()}`
    const newName = `${oldName} renamed`
    const id = await create(a, oldName)
    await warm(id, oldName)
    await holdingRow(db.url!, id, async () => {
      const { sent } = await writeWaitingOnLock(a, probe, "PUT", `/authors/${id}`, newName, "UPDATE authors")
      expect((await a.service.stop("SIGKILL")).code).toBe("SIGKILL")
      expect(await sent).toBe("not answered")
    })
    await eventually(async () => (await databaseOf(probe, id)).name === newName, "the rename to commit after the kill")
    await reflected(b, id, oldName, newName)
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("two instances on one PostgreSQL without Redis", () => {
  const cleanups: Cleanups = []
  afterAll(() => runCleanups(cleanups))

  it("a create and a rename on one are seen on the other", async () => {
    const db = await createPostgresDatabase(TEST_DATABASE_URL!)
    cleanups.push(() => db.dispose())
    const env = serviceEnv(db, undefined, "unused:")
    const a = await started(env, cleanups)
    const b = await started(env, cleanups)
    const list = async () => ((await get(b, "/authors")).body as ReadonlyArray<Author>).map((x) => x.name)
    for (let i = 0; i < 2; i++) expect(await list()).toEqual([])
    const name = `Elsewhere ${randomUUID()}`
    const created = await request(a, "POST", "/authors", { token: a.token, body: { name } })
    expect(created.status).toBe(201)
    await eventually(async () => (await list()).includes(name), "the create seen on the other instance")
    const id = (created.body as Author).id
    expect((await request(a, "PUT", `/authors/${id}`, { token: a.token, body: { name: `${name} renamed` } })).status).toBe(200)
    await eventually(async () => (await list()).includes(`${name} renamed`), "the rename seen on the other instance")
  })
})
