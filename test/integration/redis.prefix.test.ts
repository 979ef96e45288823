/**
 * docs/configuration.md#redis-keys: every key and channel the service uses in Redis carries
 * `REDIS_KEY_PREFIX`, so several deployments can share one Redis. The service runs with a unique
 * prefix against TEST_REDIS_URL and does what touches Redis — logins (one failed), requests keyed
 * by IP and by user, a WebSocket connection and message, a broadcast, an audit record through the
 * stream — while the test watches:
 * - SCAN: the keys naming this test's user, and the prefixed keys that must exist;
 * - PUBSUB CHANNELS while the WebSocket is connected;
 * - MONITOR, for everything else: the shared Redis also serves other test files (and other
 *   deployments), so a key or channel is attributed to this service by the connection that sent
 *   it (its connections are named through the URL's `connectionName`; CLIENT LIST gives their
 *   addresses) — and the keys of each command as Redis itself reads them (COMMAND GETKEYS),
 *   including those a Lua script touches (MONITOR lists them, as `lua`, right after the script's call).
 * The one channel that cannot carry a prefix is Redis's own expiry notification
 * (`__keyevent@<db>__:expired`), whose name Redis fixes.
 */
import { Option } from "effect"
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { connect } from "node:net"
import { describe, expect, it } from "vitest"
import { awaitAuditRecord } from "../support/AuditTrail.ts"
import { eventually } from "../support/Eventually.ts"
import { login, request, signToken, startTestApp, TEST_REDIS_URL, type TestApp } from "../support/TestApp.ts"
import { connectWs } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"
import { onPath } from "../support/Binaries.ts"
import { clusterMode, sentinelMode } from "../support/RedisModes.ts"
import { bulkStrings, redisCall, startRedisCluster, startRedisSentinelGroup } from "../support/RedisTopology.ts"

interface Monitored {
  /** `ip:port` of the connection, or `lua` for a command a script ran. */
  readonly source: string
  /** The command and its arguments, as sent (bytes). */
  readonly args: ReadonlyArray<Buffer>
}

const ESCAPES: Record<string, number> = { n: 10, r: 13, t: 9, a: 7, b: 8, "\\": 92, "\"": 34 }

/** One MONITOR line: `<time> [<db> <source>] "arg" "arg" …`, arguments quoted as Redis's sdscatrepr writes them. */
const parseMonitorLine = (line: string): Monitored | undefined => {
  const open = line.indexOf("[")
  const close = line.indexOf("]", open)
  if (open === -1 || close === -1) return undefined
  const source = line.slice(open + 1, close).split(" ")[1] ?? ""
  const args: Array<Buffer> = []
  let i = close + 1
  while (i < line.length) {
    if (line[i] !== "\"") {
      i++
      continue
    }
    const bytes: Array<number> = []
    i++
    while (i < line.length && line[i] !== "\"") {
      if (line[i] === "\\") {
        const next = line[i + 1] ?? ""
        if (next === "x") {
          bytes.push(parseInt(line.slice(i + 2, i + 4), 16))
          i += 4
        } else {
          bytes.push(ESCAPES[next] ?? next.charCodeAt(0))
          i += 2
        }
      } else {
        bytes.push(line.charCodeAt(i))
        i++
      }
    }
    i++
    args.push(Buffer.from(bytes))
  }
  return { source, args }
}

/** A raw MONITOR connection: every command the server runs, in its order. */
const startMonitor = async (url: string) => {
  const parsed = new URL(url)
  const socket = connect(Number(parsed.port === "" ? 6379 : parsed.port), parsed.hostname)
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject))
  socket.on("error", () => {})
  const events: Array<Monitored> = []
  const waiters: Array<{ readonly match: (e: Monitored) => boolean; readonly resolve: () => void }> = []
  let failure: string | undefined
  let pending = ""
  socket.setEncoding("latin1")
  socket.on("data", (chunk: string) => {
    pending += chunk
    let end: number
    while ((end = pending.indexOf("\r\n")) !== -1) {
      const line = pending.slice(0, end)
      pending = pending.slice(end + 2)
      if (line.startsWith("-")) failure = line
      if (!line.startsWith("+") || line === "+OK") continue
      const event = parseMonitorLine(line.slice(1))
      if (event === undefined) continue
      events.push(event)
      for (const waiter of waiters.filter((w) => w.match(event))) {
        waiters.splice(waiters.indexOf(waiter), 1)
        waiter.resolve()
      }
    }
  })
  const password = decodeURIComponent(parsed.password)
  if (password !== "") {
    const auth = parsed.username === "" ? ["AUTH", password] : ["AUTH", decodeURIComponent(parsed.username), password]
    socket.write(`*${auth.length}\r\n${auth.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`)
  }
  socket.write("*1\r\n$7\r\nMONITOR\r\n")
  return {
    events,
    failure: () => failure,
    /** Resolves once a command matching `match` has been seen (everything the server ran before it is in `events`). */
    until: (match: (e: Monitored) => boolean) =>
      new Promise<void>((resolve) => {
        if (events.some(match)) resolve()
        else waiters.push({ match, resolve })
      }),
    close: () => socket.destroy()
  }
}

/** Every key matching `pattern` (SCAN, the whole keyspace of the database). */
const scanAll = async (redis: Redis, pattern: string) => {
  const keys = new Set<string>()
  let cursor = "0"
  do {
    const [next, batch] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000)
    cursor = next
    for (const key of batch) keys.add(key)
  } while (cursor !== "0")
  return [...keys]
}

/** CLIENT LIST as `field → value` maps. */
const clientList = (text: string) =>
  text.split("\n").filter((line) => line.trim() !== "").map((line) =>
    new Map(line.trim().split(" ").map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)] as const))
  )

/**
 * What touches Redis: logins (one failed: counted per username), requests keyed by IP and by user,
 * a WebSocket (connection slot, session, message limit) and a broadcast reaching it, still open.
 */
const touchRedis = async (app: TestApp, run: string, user: string) => {
  expect((await request(app, "POST", "/login", { body: { username: user, password: "wrong" } })).status).toBe(401)
  const token = await signToken(app, { sub: user, preferred_username: user, roles: ["get-authors", "create-author"] })
  expect((await request(app, "GET", "/authors", { token })).status).toBe(200)
  expect((await request(app, "GET", "/authors")).status).toBe(401)
  const ws = connectWs(app.url, { token })
  expect((await ws.request(1, {})).status_code).toBe(0)
  const created = await request(app, "POST", "/authors", { token, body: { name: `Prefixed ${run}` } })
  expect(created.status).toBe(201)
  expect((await ws.broadcasts.take()).data).toMatchObject({ event: "author.created" })
  return { ws, created }
}

const SUBSCRIBING = new Set(["subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe"])
const PUBLISHING = new Set(["publish", "spublish"])

describe.runIf(TEST_REDIS_URL !== undefined)("REDIS_KEY_PREFIX on every key and channel", () => {
  it("HTTP requests, logins, a WebSocket, a broadcast and the audit stream use only prefixed keys and channels", async () => {
    const run = randomUUID()
    const prefix = `test-prefix-${run}:`
    const connectionName = `ads-prefix-${run}`
    /** The user of this test: keys that name a user or username name this one. */
    const user = `prefix-user-${run}`
    const serviceUrl = new URL(TEST_REDIS_URL!)
    serviceUrl.searchParams.set("connectionName", connectionName) // ioredis takes options from the query
    const database = Number(serviceUrl.pathname.slice(1) || "0")
    const expiredEvents = `__keyevent@${database}__:expired`
    const probe = new Redis(TEST_REDIS_URL!, { maxRetriesPerRequest: 1 })
    const monitor = await startMonitor(TEST_REDIS_URL!)
    let app: TestApp | undefined
    try {
      app = await startTestApp({
        config: {
          redis: Option.some(singleRedis(serviceUrl.toString())),
          redisKeyPrefix: prefix,
          rateLimitEnabled: true,
          auditLogEnabled: true
        }
      })
      const admin = (await login(app, "admin")).access_token
      const { ws, created } = await touchRedis(app, run, user)
      const channels = await probe.pubsub("CHANNELS", `${prefix}*`) as Array<string>
      expect(channels).toContain(`${prefix}ws:broadcast`)
      // The audit stream: the record went through it into the database.
      await awaitAuditRecord(app, admin, created.headers.get("x-request-id")!)

      // SCAN, while the connection is open: every key naming this test's user is prefixed, and the
      // service's keys are there under the prefix.
      const named = await scanAll(probe, `*${run}*`)
      expect(named.length).toBeGreaterThan(0)
      expect(named.filter((key) => !key.startsWith(prefix))).toEqual([])
      const prefixed = await scanAll(probe, `${prefix}*`)
      expect(prefixed).toContain(`${prefix}audit:{s0}:stream`) // the journal's first shard: its first append
      expect(prefixed.some((key) => key.startsWith(`${prefix}ratelimit:`))).toBe(true)
      expect(prefixed.some((key) => key.startsWith(`${prefix}ws:`))).toBe(true)

      // The service's own connections, named through the URL.
      const connections = clientList(await probe.client("LIST") as string).filter((c) => c.get("name") === connectionName)
      expect(connections.length).toBeGreaterThanOrEqual(2) // commands, and the subscriber
      const addresses = new Set(connections.map((c) => c.get("addr")!))
      const subscriptions = connections.reduce((n, c) => n + Number(c.get("sub") ?? 0) + Number(c.get("psub") ?? 0), 0)

      // The connection closes: its slot and session are released (the slot key goes with its last member).
      await ws.close()
      await eventually(async () => (await probe.exists(`${prefix}ws:slots:${user}`)) === 0, "the connection slot to be released")

      // Everything the server ran until now is in the MONITOR feed once it shows this marker.
      const marker = `prefix-marker-${run}`
      await probe.echo(marker)
      await monitor.until((e) => e.args[0]?.toString().toLowerCase() === "echo" && e.args[1]?.toString() === marker)
      expect(monitor.failure()).toBeUndefined()

      // The commands of the service's connections, with those their Lua scripts ran.
      const commands: Array<ReadonlyArray<Buffer>> = []
      let caller: string | undefined
      for (const event of monitor.events) {
        const source = event.source === "lua" ? caller : event.source
        if (event.source !== "lua") caller = event.source
        if (source !== undefined && addresses.has(source) && event.args.length > 0) commands.push(event.args)
      }
      const keys = new Set<string>()
      const usedChannels = new Set<string>()
      const subscribed = new Set<string>()
      const undetermined: Array<string> = []
      const distinct = new Map(commands.map((args) => [args.map((a) => a.toString("hex")).join(" "), args]))
      for (const args of distinct.values()) {
        const name = args[0]!.toString().toLowerCase()
        if (SUBSCRIBING.has(name)) {
          for (const channel of args.slice(1)) {
            usedChannels.add(channel.toString())
            if (!name.includes("unsubscribe")) subscribed.add(channel.toString())
          }
        } else if (PUBLISHING.has(name)) {
          usedChannels.add(args[1]!.toString())
        } else if (args.length > 1) {
          try {
            const found = await probe.call("COMMAND", "GETKEYS", ...args) as Array<string>
            for (const key of found) keys.add(key)
          } catch (error) {
            if (!String(error).includes("no key arguments")) undetermined.push(`${name}: ${String(error)}`)
          }
        }
      }
      console.log(`[redis prefix] ${commands.length} commands from ${addresses.size} connections; keys: ${[...keys].map((k) => k.replace(prefix, "<prefix>")).sort().join(", ")}; channels: ${[...usedChannels].map((c) => c.replace(prefix, "<prefix>")).join(", ")}`)
      expect(undetermined).toEqual([])
      expect([...keys].filter((key) => !key.startsWith(prefix))).toEqual([])
      expect([...usedChannels].filter((channel) => !channel.startsWith(prefix) && channel !== expiredEvents)).toEqual([])
      // What the feed covered: the rate limits, the connection registry, the audit stream, the broadcast.
      expect(keys).toContain(`${prefix}audit:{s0}:stream`)
      expect([...keys].some((key) => key.startsWith(`${prefix}ratelimit:`))).toBe(true)
      expect([...keys].some((key) => key.startsWith(`${prefix}ws:slots:`))).toBe(true)
      expect([...keys].some((key) => key.startsWith(`${prefix}ws:session:`))).toBe(true)
      expect(usedChannels).toContain(`${prefix}ws:broadcast`)
      // Every subscription the service's connections hold was seen being made (none escaped the feed).
      expect(subscribed.size).toBe(subscriptions)
    } finally {
      monitor.close()
      await app?.close()
      const leftovers = await scanAll(probe, `${prefix}*`)
      if (leftovers.length > 0) await probe.del(...leftovers)
      probe.disconnect()
    }
  })
})

/**
 * A Redis Cluster and a Sentinel group of the test's own (RedisTopology.ts): the service is their
 * only client, so the whole keyspace of every primary is the service's — every key there, and every
 * channel subscribed (`PUBSUB CHANNELS`, and `SHARDCHANNELS`: in a cluster the broadcast channel is
 * a sharded one), must carry the prefix. Redis's own channels (the Sentinels' hello channel, the
 * expiry events) are the exceptions.
 */
const privateTopologies = [
  ["Redis Cluster", async () => {
    const cluster = await startRedisCluster()
    return { mode: clusterMode(cluster.seeds), stop: cluster.stop, primaries: cluster.primaries }
  }],
  ["Sentinel", async () => {
    const group = await startRedisSentinelGroup()
    return { mode: sentinelMode(group.addresses, group.master), stop: group.stop, primaries: async () => [await group.primary()] }
  }]
] as const

describe.runIf(onPath("redis-server"))("REDIS_KEY_PREFIX in a Redis Cluster and a Sentinel group", () => {
  for (const [name, start] of privateTopologies) {
    it(`${name}: every key and channel the service holds is prefixed; the broadcast channel is ${name === "Redis Cluster" ? "sharded" : "a plain one"}`, async () => {
      const topology = await start()
      const run = randomUUID()
      const prefix = `test-prefix-${run}:`
      const user = `prefix-user-${run}`
      let app: TestApp | undefined
      try {
        app = await startTestApp({ config: { redis: Option.some(topology.mode.target), redisKeyPrefix: prefix, rateLimitEnabled: true } })
        const { ws } = await touchRedis(app, run, user)

        // While the connection is open: the keyspace and the subscriptions of every primary.
        const keys: Array<string> = []
        const channels: Array<string> = []
        const sharded: Array<string> = []
        for (const primary of await topology.primaries()) {
          let cursor = "0"
          do {
            const [next, ...batch] = bulkStrings(await redisCall(primary.port, "SCAN", cursor, "COUNT", "1000"))
            cursor = next!
            keys.push(...batch)
          } while (cursor !== "0")
          channels.push(...bulkStrings(await redisCall(primary.port, "PUBSUB", "CHANNELS")))
          sharded.push(...bulkStrings(await redisCall(primary.port, "PUBSUB", "SHARDCHANNELS")))
        }
        await ws.close()
        console.log(`[redis prefix] ${name}: keys ${[...new Set(keys)].map((k) => k.replace(prefix, "<prefix>")).sort().join(", ")}; channels ${channels.join(", ")}; sharded ${sharded.map((c) => c.replace(prefix, "<prefix>")).join(", ")}`)
        expect(keys.filter((key) => !key.startsWith(prefix))).toEqual([])
        expect(keys.some((key) => key.startsWith(`${prefix}ratelimit:http:user:`))).toBe(true)
        expect(keys.some((key) => key.startsWith(`${prefix}ratelimit:http:ip:`))).toBe(true)
        expect(keys.some((key) => key.startsWith(`${prefix}ratelimit:login-failures:`))).toBe(true)
        expect(keys).toContain(`${prefix}ws:slots:${user}`)
        expect(keys.some((key) => key.startsWith(`${prefix}ws:session:`))).toBe(true)
        expect([...channels, ...sharded].filter((c) => !c.startsWith(prefix) && !c.startsWith("__"))).toEqual([])
        expect(name === "Redis Cluster" ? sharded : channels).toContain(`${prefix}ws:broadcast`)
        expect(name === "Redis Cluster" ? channels : sharded).not.toContain(`${prefix}ws:broadcast`)
      } finally {
        await app?.close()
        await topology.stop()
      }
    })
  }
})
