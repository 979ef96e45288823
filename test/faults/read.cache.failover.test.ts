/**
 * docs/operations.md#redis-failover: the read cache through a Redis failover, in a Redis Cluster
 * and in a Sentinel group, with two instances of the service on one PostgreSQL and one key prefix.
 * An author's answers are cached on both instances; a rename is answered while the primary holding
 * its generations takes writes its replica never receives (the replica paused, cut off); the
 * primary is killed and the lagging replica promoted, holding the generations from before the
 * rename. Afterwards:
 * - no instance serves the old answer (the tags the promoted replica's values would make again
 *   were never stored: every instance dropped its answers when the node went, and its own side of
 *   the tags moved with the rename's notification);
 * - the next bump issues a value above every value issued before the failover (never one already
 *   used: Store/RedisLua.ts `nextGenerationLua`);
 * - 500 writes and 1,000 reads interleaved across the two instances: no read misses a write answered
 *   before it started.
 * Private topologies (test/support/RedisFailover.ts), started from `redis-server`; the test waits
 * for events, never for time.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, describe, expect, it } from "vitest"
import { generationKeyOf, LIST_GENERATION_KEY, scopeOfId } from "../../src/Authors/Generations.ts"
import { encodeCursor } from "../../src/Domain/Pagination.ts"
import { onPath } from "../support/Binaries.ts"
import { eventually } from "../support/Eventually.ts"
import { type Cleanups, runCleanups } from "../support/Launcher.ts"
import { clusterFailover, type Failover, sentinelFailover } from "../support/RedisFailover.ts"
import { connectTo } from "../support/RedisModes.ts"
import { login, request, startTestApp, TEST_DATABASE_URL, type TestApp } from "../support/TestApp.ts"

const cleanups: Cleanups = []
afterAll(() => runCleanups(cleanups.reverse()))

interface Author {
  readonly id: number
  readonly name: string
}

/** The reads of one author on `app`, each of another kind (its id's shard, the list's scope): what each saw of its name. */
const readsOf = (app: TestApp, token: string) => {
  const get = async (path: string) => {
    const res = await request(app, "GET", path, { token })
    if (res.status !== 200 && res.status !== 404) throw new Error(`GET ${path}: ${res.status} ${JSON.stringify(res.body)}`)
    return res
  }
  const find = (list: ReadonlyArray<Author>, id: number) => list.find((a) => a.id === id)?.name
  return [
    async (id: number) => {
      const res = await get(`/authors/${id}`)
      return res.status === 404 ? undefined : (res.body as Author).name
    },
    async (id: number) => find((await get(`/authors?id=${id}`)).body as ReadonlyArray<Author>, id),
    async (id: number) => find(((await get(`/authors/paginated?per_page=1&cursor=${encodeCursor(id - 1)}`)).body as { items: ReadonlyArray<Author> }).items, id),
    async (id: number) => find(((await get("/authors/paginated?per_page=100")).body as { items: ReadonlyArray<Author> }).items, id)
  ] as const
}

const scenario = (name: string, make: () => Promise<Failover>) =>
  it(`${name}: answers cached before, a rename the promoted replica never saw, then 1,000 reads interleaved with 500 writes — none stale`, async () => {
    const failover = await make()
    cleanups.push(failover.stop)
    const prefix = `test-cache-failover-${randomUUID().slice(0, 8)}:`
    const config = {
      redis: Option.some(failover.mode.target),
      redisKeyPrefix: prefix,
      rateLimitEnabled: true,
      rateLimitPerMinute: 1_000_000,
      rateLimitFailMode: "open" as const,
      auditLogEnabled: false
    }
    const a = await startTestApp({ database: "postgres", config })
    cleanups.push(a.close)
    const b = await startTestApp({ database: "postgres", databaseUrl: a.databaseUrl!, config })
    cleanups.push(b.close)
    const probe = connectTo(failover.mode)
    cleanups.push(async () => probe.disconnect())
    const tokens = [(await login(a, "admin")).access_token, (await login(b, "admin")).access_token] as const
    const apps = [a, b] as const
    const reads = apps.map((app, i) => readsOf(app, tokens[i]!))

    // An author whose id's generation is on the primary that holds the list's (in a cluster: one of three).
    const listKey = `${prefix}${LIST_GENERATION_KEY}`
    const shardKey = (id: number) => `${prefix}${generationKeyOf(scopeOfId(id))}`
    const create = async (app: TestApp, token: string, label: string) => {
      const res = await request(app, "POST", "/authors", { token, body: { name: `${label} ${randomUUID().slice(0, 8)}` } })
      expect(res.status).toBe(201)
      return res.body as Author
    }
    let author = await create(a, tokens[0], "Failover")
    while (!(await failover.together([listKey, shardKey(author.id)]))) author = await create(a, tokens[0], "Failover")

    // Cached on both instances: every kind of read twice, the second from memory.
    for (const kinds of reads) for (const read of kinds) for (let i = 0; i < 2; i++) expect(await read(author.id)).toBe(author.name)

    // The rename reaches the primary only; the replica promoted next holds the generations from before it.
    const renamed = `${author.name} renamed`
    let issued = ""
    await failover.kill([listKey, shardKey(author.id)], {
      lagging: async () => {
        expect((await request(a, "PUT", `/authors/${author.id}`, { token: tokens[0], body: { name: renamed } })).status).toBe(200)
        issued = (await probe.get(shardKey(author.id))) ?? ""
      }
    })
    expect(issued).toMatch(/^\d+$/)
    await failover.release()
    for (const app of apps) {
      await eventually(async () => {
        // Id 0 names no author: its generation is not the author's, which must stay as the failover left it.
        const res = await request(app, "GET", "/authors?id=0", { token: tokens[apps.indexOf(app)]! })
        return res.status === 200 && res.headers.get("x-ratelimit-limit") !== null
      }, "rate-limit decisions (and generations) from Redis again")
    }
    const promoted = (await probe.get(shardKey(author.id))) ?? "0"
    expect(BigInt(promoted), "the promoted replica lagged: it holds a generation from before the rename, or none").toBeLessThan(BigInt(issued))

    // No instance serves the answer from before the rename.
    for (const kinds of reads) for (const read of kinds) expect(await read(author.id)).toBe(renamed)

    // The next bump issues a value never issued before.
    expect((await request(b, "PUT", `/authors/${author.id}`, { token: tokens[1], body: { name: `${renamed} again` } })).status).toBe(200)
    expect(BigInt((await probe.get(shardKey(author.id))) ?? "0")).toBeGreaterThan(BigInt(issued))

    // 500 writes and 1,000 reads interleaved across the two instances, on a few authors: each read
    // starts after the write it checks was answered, on the other instance, having cached the
    // answer from before the write.
    const authors = [author, ...(await Promise.all([0, 1, 2].map(() => create(b, tokens[1], "Interleaved"))))]
    const current = new Map<number, string | undefined>(authors.map((x) => [x.id, x.id === author.id ? `${renamed} again` : x.name]))
    const stale: Array<string> = []
    for (let step = 0; step < 500; step++) {
      const writer = step % 2
      const reader = 1 - writer
      const id = authors[step % authors.length]!.id
      const read = reads[reader]![step % reads[reader]!.length]!
      if ((await read(id)) !== current.get(id)) stale.push(`step ${step}: before the write`)
      const name = `Interleaved ${step} ${randomUUID().slice(0, 8)}`
      expect((await request(apps[writer]!, "PUT", `/authors/${id}`, { token: tokens[writer]!, body: { name } })).status).toBe(200)
      current.set(id, name)
      const seen = await read(id)
      if (seen !== name) stale.push(`step ${step}: read on ${reader === 0 ? "a" : "b"} saw ${seen}, the write answered ${name}`)
    }
    expect(stale).toEqual([])
  })

describe.runIf(onPath("redis-server") && TEST_DATABASE_URL !== undefined)("the read cache through a Redis failover", () => {
  scenario("Redis Cluster", clusterFailover)
  scenario("Sentinel", sentinelFailover)
})
