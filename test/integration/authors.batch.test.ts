/**
 * Writes in batches, each answered exactly as if it ran alone (docs/architecture.md#writes-in-batches),
 * at the boundary a client sees: status and body (HTTP), frames (WebSocket package 3), the audit
 * record of each request, and reads after each answer on both instances.
 *
 * A batch is made on purpose: a first create (the opener) waits on the test's own transaction,
 * which holds its name uncommitted, so its statement is in flight; the creates sent meanwhile, one
 * after the other (each counted in `author_writes_waiting` before the next is sent: the order they
 * were received), wait for it and are written together once the test rolls its transaction back.
 * Renames and deletes the same way, behind a rename of a row the test holds.
 * That needs a session of the test's own, so PostgreSQL (the property test of the same rules runs
 * on the embedded database too: authors.batch.property.test.ts).
 */
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { singleRedis } from "../../src/Config/Redis.ts"
import { APPLICATION_NAME } from "../../src/Db/Database.ts"
import { layerTracingTo } from "../../src/Observability/Tracing.ts"
import { awaitAuditRecord } from "../support/AuditTrail.ts"
import { eventually } from "../support/Eventually.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, TEST_REDIS_URL, type TestApp, type TestAppOptions } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"

interface Author {
  readonly id: number
  readonly name: string
  readonly created_at: string
}
/** One request's answer, as the client saw it: HTTP status (or WebSocket status_code) and body (or data). */
interface Answer {
  readonly status: number
  readonly body: unknown
  /** X-Request-ID (HTTP) or the envelope's req_id (WebSocket): its audit record's `request_id`. */
  readonly requestId: string
}

const taken = (name: string) => ({ detail: `Author with name ${name} already exists` })
const unique = (label: string) => `${label} ${randomUUID().slice(0, 8)}`

const connect = async (url: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  return client
}

/**
 * A transaction of the test's own holding `name` uncommitted: a create of it waits for its end.
 * With the triggers off, so it holds the name's index entry only: the counter trigger would also
 * hold one of the 32 counter rows (migrations/0004), on which any create of a session of the same
 * shard would wait too. A hold that commits leaves the total one short (docs/operations.md): the
 * test deletes its row the same way.
 */
const holding = async (url: string, name: string) => {
  const client = await connect(url)
  client.on("error", () => {}) // its database dropped at the end of a failed test
  await client.query("BEGIN")
  await client.query("SET LOCAL session_replication_role = replica")
  await client.query("INSERT INTO authors (name) VALUES ($1)", [name])
  let open = true
  const end = async (how: "COMMIT" | "ROLLBACK") => {
    if (!open) return
    open = false
    await client.query(how)
    await client.end()
  }
  return { commit: () => end("COMMIT"), rollback: () => end("ROLLBACK") }
}

/** The service's statements waiting on a lock, whose text starts with `prefix`. */
const waitingOnLock = async (probe: pg.Client, prefix = "INSERT INTO authors") =>
  Number((await probe.query<{ n: string }>(
    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = $1 AND query LIKE $2",
    [APPLICATION_NAME, `${prefix}%`]
  )).rows[0]!.n)

const metrics = async (app: Pick<TestApp, "url">) => {
  const m = await scrapeMetrics(app.url)
  return {
    waiting: m.sum("author_writes_waiting"),
    batches: m.firstOrZero("author_write_batch_size_count", { operation: "create" }),
    requests: m.firstOrZero("author_write_batch_size_sum", { operation: "create" })
  }
}

/** How a test sends one create: over HTTP or as a WebSocket package 3. */
type Send = (name: string) => Promise<Answer>
const httpSend = (app: Pick<TestApp, "url">, token: string): Send => async (name) => {
  const res = await request(app, "POST", "/authors", { token, body: { name } })
  return { status: res.status, body: res.body, requestId: res.headers.get("x-request-id")! }
}
/** A connection of its own for each message: one connection's messages are processed one after the other. */
const wsSend = (app: Pick<TestApp, "url">, token: string): Send => async (name) => {
  const ws = connectWs(app.url, { token })
  try {
    const frame = await ws.request(3, { name })
    return { status: frame.status_code, body: frame.data, requestId: frame.req_id }
  } finally {
    await ws.close()
  }
}

interface BatchHooks {
  /** Once every create of the batch waits, before the opener's name is released. */
  readonly waiting?: () => Promise<void>
  /** Once the opener was answered: the batch's statement is on its way. */
  readonly sent?: () => Promise<void>
}

/**
 * Sends `names` as one batch through `send` (see the header): resolves with their answers, in the
 * order sent, once the opener (a create of a name the test holds on `url`) has been answered 201.
 */
const batchOf = async (app: Pick<TestApp, "url">, url: string, probe: pg.Client, send: Send, names: ReadonlyArray<string>, hooks: BatchHooks = {}) => {
  const opener = unique("Opener")
  const hold = await holding(url, opener)
  try {
    const before = (await metrics(app)).waiting
    const opened = send(opener)
    await eventually(async () => (await waitingOnLock(probe)) === 1, "the opener's statement to wait on the test's lock")
    const answers: Array<Promise<Answer>> = []
    for (const [i, name] of names.entries()) {
      answers.push(send(name))
      await eventually(async () => (await metrics(app)).waiting === before + 2 + i, `create ${i + 1} of the batch to wait for the opener`)
    }
    await hooks.waiting?.()
    await hold.rollback()
    expect([201, 0], "the opener (HTTP or WebSocket), once its name was released").toContain((await opened).status)
    await hooks.sent?.()
    return await Promise.all(answers)
  } finally {
    await hold.rollback()
  }
}

/**
 * Renames and deletes as one batch, the same way: the opener renames a row the test holds
 * (`SELECT … FOR UPDATE`), and `starts` are sent one by one while it waits.
 */
const changeBatchOf = async (app: Pick<TestApp, "url">, url: string, probe: pg.Client, token: string, starts: ReadonlyArray<() => Promise<Answer>>) => {
  const row = (await httpSend(app, token)(unique("Held row"))).body as Author
  const holder = await connect(url)
  holder.on("error", () => {})
  try {
    await holder.query("BEGIN")
    await holder.query("SELECT id FROM authors WHERE id = $1 FOR UPDATE", [row.id])
    const before = (await metrics(app)).waiting
    const opened = request(app, "PUT", `/authors/${row.id}`, { token, body: { name: unique("Opened") } })
    await eventually(async () => (await waitingOnLock(probe, "UPDATE authors")) === 1, "the opener's statement to wait on the test's row lock")
    const answers: Array<Promise<Answer>> = []
    for (const [i, start] of starts.entries()) {
      answers.push(start())
      await eventually(async () => (await metrics(app)).waiting === before + 2 + i, `change ${i + 1} of the batch to wait for the opener`)
    }
    await holder.query("COMMIT")
    expect((await opened).status, "the opener, once its row was released").toBe(200)
    return await Promise.all(answers)
  } finally {
    await holder.end()
  }
}

const expectCreated = (answer: Answer, name: string, status: number) => {
  expect(answer.status, name).toBe(status)
  expect(answer.body, name).toEqual({ id: expect.any(Number), name, created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/) })
  return (answer.body as Author).id
}

describe.runIf(TEST_DATABASE_URL !== undefined)("creates in batches on one instance, each answered as if alone", () => {
  let app: TestApp
  let token: string
  let probe: pg.Client

  beforeAll(async () => {
    app = await startTestApp({ database: "postgres", config: { rateLimitEnabled: false, wsMaxConnectionsPerUser: 100 } })
    token = (await login(app, "admin")).access_token
    probe = await connect(app.databaseUrl!)
  })
  afterAll(async () => {
    await probe?.end()
    await app?.close()
  })

  const send = () => httpSend(app, token)

  it.each(["HTTP", "WebSocket"] as const)("%s: a batch of 6 creates, one statement: each its own row (201), ids in the order received, its own audit record, read back after", async (transport) => {
    const names = Array.from({ length: 6 }, (_, i) => unique(`Batch ${transport} ${i}`))
    const before = await metrics(app)
    const answers = await batchOf(app, app.databaseUrl!, probe, transport === "HTTP" ? send() : wsSend(app, token), names)
    const ids = answers.map((answer, i) => expectCreated(answer, names[i]!, transport === "HTTP" ? 201 : 0))
    expect(ids).toEqual([...ids].sort((a, b) => a - b))
    expect(new Set(ids).size).toBe(ids.length)
    const after = await metrics(app)
    // The opener alone, then the six in one statement.
    expect({ batches: after.batches - before.batches, requests: after.requests - before.requests }).toEqual({ batches: 2, requests: 7 })
    for (const [i, answer] of answers.entries()) {
      const record = await awaitAuditRecord(app, token, answer.requestId)
      expect(record, names[i]).toMatchObject(transport === "HTTP" ? { outcome: "success", response_status: 201, action_type: "POST" } : { outcome: "success", action_type: "WS:CREATE_AUTHOR" })
      expect((await request(app, "GET", `/authors/${ids[i]}`, { token })).body).toEqual(answer.body)
    }
  })

  it.each(["HTTP", "WebSocket"] as const)("%s: two of one batch with the same name: the first 201, the second told it exists; names compared as stored", async (transport) => {
    const name = unique("Twice")
    // A lone surrogate is stored as U+FFFD: these two are one name for the unique constraint.
    const lone = `${unique("Surrogate")} \ud800`
    const names = [name, unique("Between"), name, lone, lone.replace("\ud800", "\ufffd")]
    const answers = await batchOf(app, app.databaseUrl!, probe, transport === "HTTP" ? send() : wsSend(app, token), names)
    const ok = transport === "HTTP" ? 201 : 0
    const conflict = transport === "HTTP" ? 409 : 2
    const conflictBody = (n: string) => (transport === "HTTP" ? taken(n) : { msg: taken(n).detail })
    const first = expectCreated(answers[0]!, name, ok)
    const between = expectCreated(answers[1]!, names[1]!, ok)
    expect(answers[2]).toMatchObject({ status: conflict, body: conflictBody(name) })
    expect(answers[3]).toMatchObject({ status: ok, body: { name: lone.replace("\ud800", "\ufffd") } })
    expect(answers[4]).toMatchObject({ status: conflict, body: conflictBody(names[4]!) })
    expect(first).toBeLessThan(between)
    expect((await request(app, "GET", `/authors?name=${encodeURIComponent(name)}`, { token })).body).toEqual([answers[0]!.body])
    for (const answer of [answers[2]!, answers[4]!]) {
      expect(await awaitAuditRecord(app, token, answer.requestId)).toMatchObject({ outcome: "error", response_status: 409 })
    }
  })

  it("a batch whose every create names an existing author, twice over: each told its own name exists", async () => {
    const existing = [unique("Exists"), unique("Exists")]
    for (const name of existing) expect((await send()(name)).status).toBe(201)
    const names = [existing[0]!, existing[1]!, existing[0]!]
    const total = async () => ((await request(app, "GET", "/authors/paginated?per_page=1", { token })).body as { meta: { total: number } }).meta.total
    const before = { total: await total(), metrics: await metrics(app) }
    const answers = await batchOf(app, app.databaseUrl!, probe, send(), names)
    expect(answers.map((a) => [a.status, a.body])).toEqual(names.map((n) => [409, taken(n)]))
    const after = await metrics(app)
    expect({ batches: after.batches - before.metrics.batches, requests: after.requests - before.metrics.requests }).toEqual({ batches: 2, requests: 4 })
    expect(await total()).toBe(before.total + 1) // the opener only
  })

  it.each(["COMMIT", "ROLLBACK"] as const)("a create whose name another transaction holds uncommitted waits for it: after its %s", async (end) => {
    const held = unique("Held")
    const other = unique("Beside")
    const hold = await holding(app.databaseUrl!, held)
    const answers = await batchOf(app, app.databaseUrl!, probe, send(), [held, other], {
      sent: async () => {
        // The batch's statement waits on the held name, then the test's transaction ends.
        await eventually(async () => (await waitingOnLock(probe)) === 1, "the batch to wait on the held name")
        await (end === "COMMIT" ? hold.commit() : hold.rollback())
      }
    })
    if (end === "COMMIT") expect(answers[0]).toMatchObject({ status: 409, body: taken(held) })
    else expectCreated(answers[0]!, held, 201)
    expectCreated(answers[1]!, other, 201)
    if (end === "COMMIT") {
      const client = await connect(app.databaseUrl!)
      await client.query("SET session_replication_role = replica")
      await client.query("DELETE FROM authors WHERE name = $1", [held])
      await client.end()
    }
  })

  it("a batch cut by the statement deadline (one name held past it): every create answered as if alone", async () => {
    const held = unique("Held past the deadline")
    const names = [unique("Before"), held, unique("After")]
    const hold = await holding(app.databaseUrl!, held)
    try {
      const before = await metrics(app)
      const answers = await batchOf(app, app.databaseUrl!, probe, send(), names)
      // The held name alone waits again, past the deadline: what a lone create gets then.
      expect(answers.map((a) => a.status)).toEqual([201, 500, 201])
      expect(answers[1]!.body).toEqual({ detail: "Internal server error" })
      expect((answers[0]!.body as Author).id).toBeLessThan((answers[2]!.body as Author).id)
      const after = await metrics(app)
      // The opener, then each of the three alone: the cut statement answered none.
      expect({ batches: after.batches - before.batches, requests: after.requests - before.requests }).toEqual({ batches: 4, requests: 4 })
    } finally {
      await hold.rollback()
    }
  })

  it("a name PostgreSQL refuses in one create (a constraint of the operator's) fails that create alone", async () => {
    // No name that passes the schema is refused by a UTF-8 database: a CHECK constraint refuses one.
    await probe.query("ALTER TABLE authors ADD CONSTRAINT test_refused CHECK (name NOT LIKE 'Refused%')")
    try {
      const names = [unique("Kept"), unique("Refused"), unique("Kept")]
      const answers = await batchOf(app, app.databaseUrl!, probe, send(), names)
      expect(answers.map((a) => a.status)).toEqual([201, 500, 201])
      expectCreated(answers[0]!, names[0]!, 201)
      expectCreated(answers[2]!, names[2]!, 201)
    } finally {
      await probe.query("ALTER TABLE authors DROP CONSTRAINT test_refused")
    }
  })

  it("renames and deletes in one batch, each answered as alone in the order received: names freed and taken, the same row twice, an unknown id", async () => {
    const names = { a: unique("A"), b: unique("B"), c: unique("C"), d: unique("D"), b2: unique("B moved") }
    const ids: Record<string, number> = {}
    for (const key of ["a", "b", "c", "d"] as const) ids[key] = expectCreated(await send()(names[key]), names[key], 201)
    const put = (id: number, name: string) => async (): Promise<Answer> => {
      const res = await request(app, "PUT", `/authors/${id}`, { token, body: { name } })
      return { status: res.status, body: res.body, requestId: res.headers.get("x-request-id")! }
    }
    const del = (id: number) => async (): Promise<Answer> => {
      const res = await request(app, "DELETE", `/authors/${id}`, { token })
      return { status: res.status, body: res.body, requestId: res.headers.get("x-request-id")! }
    }
    const answers = await changeBatchOf(app, app.databaseUrl!, probe, token, [
      put(ids["a"]!, names.b), // B still holds it: 409
      put(ids["b"]!, names.b2), // B moves away: 200
      put(ids["c"]!, names.b), // now free: 200
      del(ids["d"]!), // 204
      del(ids["d"]!), // gone: 404
      put(ids["d"]!, unique("Never")), // gone: 404
      put(1_999_999_999, unique("Nobody")), // no such author: 404
      put(ids["c"]!, names.a) // A still holds it: 409
    ])
    expect(answers.map((a) => a.status)).toEqual([409, 200, 200, 204, 404, 404, 404, 409])
    expect(answers[0]!.body).toEqual(taken(names.b))
    expect(answers[1]!.body).toMatchObject({ id: ids["b"], name: names.b2 })
    expect(answers[2]!.body).toMatchObject({ id: ids["c"], name: names.b })
    expect(answers[4]!.body).toEqual({ detail: `Author with ID ${ids["d"]} not found` })
    expect(answers[7]!.body).toEqual(taken(names.a))
    const read = async (id: number) => (await request(app, "GET", `/authors/${id}`, { token })).body as Author
    expect([(await read(ids["a"]!)).name, (await read(ids["b"]!)).name, (await read(ids["c"]!)).name]).toEqual([names.a, names.b2, names.b])
    expect((await request(app, "GET", `/authors/${ids["d"]}`, { token })).status).toBe(404)
    for (const answer of answers) expect((await awaitAuditRecord(app, token, answer.requestId)).response_status).toBe(answer.status)
  })

  it("a create whose client went away while it waited for its batch is still written, and read back", async () => {
    const names = [unique("Stays"), unique("Gone"), unique("Stays")]
    const controller = new AbortController()
    const sends: Send = (name) =>
      name !== names[1]
        ? send()(name)
        : fetch(`${app.url}/authors`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify({ name }),
          signal: controller.signal
        }).then(() => ({ status: 0, body: "answered", requestId: "" }), () => ({ status: 0, body: "gone", requestId: "" }))
    const reads = async (name: string) => (await request(app, "GET", `/authors?name=${encodeURIComponent(name)}`, { token })).body
    for (const name of names) expect(await reads(name)).toEqual([]) // cached empty
    const answers = await batchOf(app, app.databaseUrl!, probe, sends, names, {
      waiting: async () => {
        controller.abort()
        // Two round trips through the service after the abort: it has seen the client go.
        await metrics(app)
        await metrics(app)
      }
    })
    expect(answers[1]!.body).toBe("gone")
    for (const name of names) expect(await reads(name)).toMatchObject([{ name }])
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined && TEST_REDIS_URL !== undefined)("creates in batches on two instances (PostgreSQL and Redis)", () => {
  let a: TestApp
  let b: TestApp
  /** Each instance's own token: each has its built-in identity provider's key in its DATA_DIR. */
  const tokens = new Map<TestApp, string>()
  const tokenOf = (at: TestApp) => tokens.get(at)!
  let probe: pg.Client
  const prefix = `test-batch-${randomUUID()}:`
  const options = (): TestAppOptions => ({
    database: "postgres",
    config: { redis: Option.some(singleRedis(TEST_REDIS_URL ?? "")), redisKeyPrefix: prefix, rateLimitEnabled: false, wsMaxConnectionsPerUser: 100 }
  })

  beforeAll(async () => {
    a = await startTestApp(options())
    b = await startTestApp({ ...options(), databaseUrl: a.databaseUrl! })
    for (const at of [a, b]) tokens.set(at, (await login(at, "admin")).access_token)
    probe = await connect(a.databaseUrl!)
  })
  afterAll(async () => {
    await probe?.end()
    await b?.close()
    await a?.close()
  })

  /** Every read of `name` on both instances, over HTTP and WebSocket: the author, or nothing. */
  const readsOf = async (name: string) => {
    const seen: Array<unknown> = []
    for (const at of [a, b]) {
      seen.push((await request(at, "GET", `/authors?name=${encodeURIComponent(name)}`, { token: tokenOf(at) })).body)
      const ws = connectWs(at.url, { token: tokenOf(at) })
      seen.push((await ws.request(1, { filters: { name } })).data)
      await ws.close()
    }
    return seen
  }

  it.each(["HTTP", "WebSocket"] as const)("%s: a batch on one instance, a duplicate of its names on the other; every answer read back on both, with the total", async (transport) => {
    const names = [unique(`Two ${transport}`), unique(`Two ${transport}`), unique(`Two ${transport}`)]
    for (const name of names) expect(await readsOf(name)).toEqual([[], [], [], []]) // cached empty on both
    const send = transport === "HTTP" ? httpSend(a, tokenOf(a)) : wsSend(a, tokenOf(a))
    const answers = await batchOf(a, a.databaseUrl!, probe, send, [names[0]!, names[1]!, names[0]!, names[2]!])
    const ok = transport === "HTTP" ? 201 : 0
    const ids = [expectCreated(answers[0]!, names[0]!, ok), expectCreated(answers[1]!, names[1]!, ok), expectCreated(answers[3]!, names[2]!, ok)]
    expect(ids).toEqual([...ids].sort((x, y) => x - y))
    expect(answers[2]!.status).toBe(transport === "HTTP" ? 409 : 2)
    for (const [i, name] of names.entries()) {
      const row = answers[i === 2 ? 3 : i]!.body
      expect(await readsOf(name)).toEqual([[row], [row], [row], [row]])
    }
    // The other instance, told the same name exists.
    expect(await httpSend(b, tokenOf(b))(names[1]!)).toMatchObject({ status: 409, body: taken(names[1]!) })
    const totals = await Promise.all([a, b].map(async (at) => ((await request(at, "GET", "/authors/paginated?per_page=1", { token: tokenOf(at) })).body as { meta: { total: number } }).meta.total))
    const counted = Number((await probe.query<{ n: string }>("SELECT count(*) AS n FROM authors")).rows[0]!.n)
    expect(totals).toEqual([counted, counted])
  })
})

describe.runIf(TEST_DATABASE_URL !== undefined)("a batch traced: a span per request, the batch's statement linked to each", () => {
  const exporter = new InMemorySpanExporter()
  let app: TestApp
  let token: string
  let probe: pg.Client
  beforeAll(async () => {
    app = await startTestApp({ database: "postgres", config: { rateLimitEnabled: false }, tracing: layerTracingTo(new SimpleSpanProcessor(exporter)) })
    token = (await login(app, "admin")).access_token
    probe = await connect(app.databaseUrl!)
  })
  afterAll(async () => {
    await probe?.end()
    await app?.close()
  })

  it("three creates in one batch: three server spans, one Authors.createBatch span linking them, its SQL inside it", async () => {
    const traceOf = new Map<string, string>()
    const traced: Send = async (name) => {
      const traceId = randomUUID().replaceAll("-", "")
      traceOf.set(name, traceId)
      const res = await request(app, "POST", "/authors", { token, body: { name }, headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } })
      return { status: res.status, body: res.body, requestId: res.headers.get("x-request-id")! }
    }
    const names = [unique("Traced"), unique("Traced"), unique("Traced")]
    const answers = await batchOf(app, app.databaseUrl!, probe, traced, names)
    expect(answers.map((a) => a.status)).toEqual([201, 201, 201])
    const batch = await eventually(() => {
      const found = exporter.getFinishedSpans().find((s) => s.name === "Authors.createBatch" && s.attributes["batch.size"] === 3)
      return found ?? false
    }, "the batch's span")
    expect(new Set(batch.links.map((link) => link.context.traceId))).toEqual(new Set(names.map((n) => traceOf.get(n))))
    for (const name of names) {
      expect(exporter.getFinishedSpans().some((s) => s.name === "POST /authors" && s.spanContext().traceId === traceOf.get(name))).toBe(true)
    }
    const sql = exporter.getFinishedSpans().filter((s) => s.parentSpanContext?.spanId === batch.spanContext().spanId && s.name.startsWith("sql."))
    expect(sql.length).toBeGreaterThan(0)
  })
})
