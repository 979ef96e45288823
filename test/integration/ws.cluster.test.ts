/**
 * Two real service processes sharing PostgreSQL and Redis, the way users scale out (docs/websocket.md#many-instances):
 * the per-user connection limit spans both, a broadcast started on one reaches the clients of the
 * other, a session expiry closes the connection where it lives, and a killed instance's slots free
 * themselves — on each Redis mode the run offers (one server, a Redis Cluster, a Sentinel group:
 * test/support/RedisModes.ts).
 */
import { randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { eventually } from "../support/Eventually.ts"
import { type Service, startService } from "../support/Launcher.ts"
import { type RedisMode, redisModes } from "../support/RedisModes.ts"
import { createPostgresDatabase, request, signToken, TEST_DATABASE_URL, type TestDatabase } from "../support/TestApp.ts"
import { connectWs, type WsClient } from "../support/WsClient.ts"

type Instance = Service

describe.runIf(TEST_DATABASE_URL !== undefined && redisModes.length > 0)("two instances sharing PostgreSQL and Redis", () => {
  for (const mode of redisModes) describe(`Redis (${mode.name})`, () => twoInstances(mode))
})

const twoInstances = (mode: RedisMode) => {
  let db: TestDatabase
  let dataDir: string
  let a: Instance
  let b: Instance
  const clients: Array<WsClient> = []

  const start = (env: Record<string, string>): Promise<Instance> => startService({ env, ready: "/health" })

  /** Tokens both instances accept: signed with the built-in provider's key in the shared DATA_DIR. */
  const tokenFor = (roles: ReadonlyArray<string>, expiresIn?: string) => {
    const sub = `cluster-${randomUUID()}`
    return signToken({ dataDir }, { sub, preferred_username: sub, roles }, expiresIn !== undefined ? { expiresIn } : {})
  }

  const connect = (instance: Instance, token: string) => {
    const client = connectWs(instance.url, { token })
    clients.push(client)
    return client
  }

  const connected = async (instance: Instance, token: string) => {
    const client = connect(instance, token)
    expect((await client.request(1, { filters: { id: -1 } })).status_code).toBe(0)
    return client
  }

  beforeAll(async () => {
    db = await createPostgresDatabase(TEST_DATABASE_URL ?? "")
    dataDir = mkdtempSync(join(tmpdir(), "ads-cluster-"))
    const env = {
      HOST: "127.0.0.1",
      DATABASE_URL: db.url!,
      ...mode.env,
      REDIS_KEY_PREFIX: `test-cluster-${randomUUID()}:`,
      DATA_DIR: dataDir,
      RATE_LIMIT_ENABLED: "false",
      WS_MAX_CONNECTIONS_PER_USER: "2",
      // A lease renewed every third of it: 5 s outlasts a renewal late by seconds on a busy machine.
      WS_SLOT_TTL_SECONDS: "5",
      WS_SESSION_GRACE_SECONDS: "0",
      LOG_LEVEL: "error"
    }
    // One after the other: the first creates the signing key in DATA_DIR, the second reads it.
    a = await start(env)
    b = await start(env)
  })

  afterAll(async () => {
    for (const c of clients) c.ws.terminate()
    for (const instance of [a, b]) {
      if (instance !== undefined && instance.running()) await instance.stop()
    }
    await db?.dispose()
    rmSync(dataDir, { recursive: true, force: true })
  })

  it("the per-user connection limit counts the connections on both instances", async () => {
    const token = await tokenFor(["get-authors"])
    const onA = await connected(a, token)
    await connected(b, token)
    for (const instance of [a, b]) {
      expect(await connect(instance, token).closed).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })
    }
    await onA.close()
    // The slot is released when A sees the socket end (just after the client does).
    await eventually(async () => {
      const client = connect(b, token)
      return await Promise.race([client.request(1, {}).then(() => true), client.closed.then(() => false)])
    }, "a connection on B admitted once A released its slot")
  })

  it("a broadcast started on one instance reaches the clients of both", async () => {
    const onA = await connected(a, await tokenFor(["get-authors"]))
    const onB = await connected(b, await tokenFor(["get-authors"]))
    const admin = await tokenFor(["create-author"])
    const name = `Cluster ${randomUUID()}`
    const res = await request(a, "POST", "/authors", { token: admin, body: { name } })
    expect(res.status).toBe(201)
    for (const client of [onA, onB]) {
      const event = await client.broadcasts.take()
      expect(event.data).toMatchObject({ event: "author.created", author: res.body as object })
    }
  })

  it("a session expiry closes the connection on the instance that holds it", async () => {
    const longLived = await connected(a, await tokenFor(["get-authors"]))
    // 3-4 s out (whole seconds): time enough to connect and be answered on a busy machine.
    const expiring = await connected(b, await tokenFor(["get-authors"], "4s"))
    expect(await expiring.closed).toEqual({ code: 4001, reason: "Session expired" })
    expect((await longLived.request(1, {})).status_code).toBe(0)
  })

  it("killing an instance frees its slots (the lease is WS_SLOT_TTL_SECONDS)", async () => {
    const token = await tokenFor(["get-authors"])
    await connected(b, token)
    await connected(b, token)
    expect(await connect(a, token).closed).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })
    b.child.kill("SIGKILL")
    expect(await b.exited).toBe("SIGKILL")
    // No event marks a lease's end: try until A admits (5 s lease). Each attempt is answered or
    // refused; every refusal before the admission must be the limit's 1008.
    const attempt = async () => {
      const client = connect(a, token)
      const outcome = await Promise.race([
        client.request(1, { filters: { id: -1 } }).then(() => "admitted" as const),
        client.closed.then((c) => `closed ${c.code}` as const),
        client.opened.then(() => new Promise<never>(() => {}), (e: unknown) => `refused ${String(e)}` as const)
      ])
      if (outcome !== "admitted") client.ws.terminate()
      return outcome
    }
    const outcomes: Array<string> = []
    await eventually(async () => {
      outcomes.push(await attempt())
      return outcomes.at(-1) === "admitted"
    }, "A to admit once B's leases ran out")
    expect(outcomes.filter((o) => o !== "admitted" && o !== "closed 1008"), "every other attempt refused 1008").toEqual([])
    await connected(a, token)
    expect(await connect(a, token).closed).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })
  })
}
