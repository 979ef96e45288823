/**
 * W7: time from `POST /authors` until every one of N connected WebSocket clients has the
 * `author.created` broadcast; then the same with one extra client that stops reading (its socket
 * paused after asking for ~12 MB of pages), which must not delay the others. And the idle test:
 * RSS with 5,000 open connections, and W6 latency with them open vs. without.
 */
import { randomUUID } from "node:crypto"
import type { WebSocket } from "ws"
import { closeClients, openClient, openClients, percentile, type RoundResult, runHttp, type HttpSpec, ZERO_ID } from "./load.ts"
import { rssMb, type Server, settle } from "./servers.ts"

const SLOW_PAGES = 300

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export interface FanoutStats {
  readonly events: number
  /** Events for which some client had not received the broadcast after 10 s. */
  readonly incomplete: number
  /** Milliseconds from sending the POST until the last client had the event. */
  readonly p50_ms: number
  readonly p99_ms: number
  readonly max_ms: number
  /** Milliseconds from sending the POST until its response. */
  readonly post_p50_ms: number
}

const activeConnections = async (server: Server): Promise<number | undefined> => {
  const res = await fetch(`${server.url}/health`).catch(() => undefined)
  const body: unknown = res === undefined ? undefined : await res.json().catch(() => undefined)
  const ws = typeof body === "object" && body !== null ? (body as Record<string, unknown>)["websocket"] : undefined
  const n = typeof ws === "object" && ws !== null ? (ws as Record<string, unknown>)["active_connections"] : undefined
  return typeof n === "number" ? n : undefined
}

/** Posts `events` authors one after another and times each broadcast's delivery to all `clients`. */
const timeBroadcasts = async (server: Server, clients: ReadonlyArray<WebSocket>, token: string, events: number, tag: string): Promise<FanoutStats> => {
  const totals: Array<number> = []
  const posts: Array<number> = []
  let incomplete = 0
  let current: { marker: Buffer; count: number; last: number; done: () => void } | undefined
  const zero = Buffer.from(ZERO_ID)
  const onMessage = (raw: Buffer) => {
    // Matching bytes instead of parsing keeps the runner's own cost per delivery small.
    if (current !== undefined && raw.includes(current.marker) && raw.includes(zero)) {
      current.count++
      current.last = performance.now()
      if (current.count === clients.length) current.done()
    }
  }
  for (const ws of clients) ws.on("message", onMessage)
  try {
    for (let i = 0; i < events; i++) {
      const name = `fanout ${tag} ${i} ${randomUUID().slice(0, 8)}`
      let done = () => {}
      const complete = new Promise<boolean>((resolve) => {
        done = () => resolve(true)
        setTimeout(() => resolve(false), 10_000)
      })
      current = { marker: Buffer.from(JSON.stringify(name)), count: 0, last: 0, done }
      const t0 = performance.now()
      const res = await fetch(`${server.url}/authors`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ name })
      })
      posts.push(performance.now() - t0)
      if (res.status !== 201) throw new Error(`POST /authors answered ${res.status}`)
      await res.arrayBuffer()
      if (await complete) totals.push(current.last - t0)
      else incomplete++
      await sleep(50)
    }
  } finally {
    for (const ws of clients) ws.off("message", onMessage)
    current = undefined
  }
  const sorted = Float64Array.from(totals).sort()
  const sortedPosts = Float64Array.from(posts).sort()
  return {
    events,
    incomplete,
    p50_ms: percentile(sorted, 50),
    p99_ms: percentile(sorted, 99),
    max_ms: sorted.length === 0 ? NaN : sorted[sorted.length - 1]!,
    post_p50_ms: percentile(sortedPosts, 50)
  }
}

export interface FanoutResult {
  readonly clients: number
  readonly connect_s: number
  readonly normal: FanoutStats
  readonly with_slow_client: FanoutStats
  /** Bytes the slow client asked for without reading. */
  readonly slow_client_requested_mb: number
  readonly active_before_slow: number | undefined
  /** The server's count after the slow-client events: one less means the slow client was dropped. */
  readonly active_after_slow: number | undefined
  readonly rss_mb: number | undefined
}

export const measureFanout = async (server: Server, tokens: ReadonlyArray<string>, clientsWanted: number, events: number): Promise<FanoutResult> => {
  const t0 = performance.now()
  const clients = await openClients(server.wsUrl, tokens, clientsWanted, 100)
  const connect_s = (performance.now() - t0) / 1000
  let slow: WebSocket | undefined
  try {
    await sleep(500)
    const token = tokens[0]!
    await timeBroadcasts(server, clients, token, 3, "warmup")
    const normal = await timeBroadcasts(server, clients, token, events, "normal")
    const active_before_slow = await activeConnections(server)
    // The slow client: asks for SLOW_PAGES pages of 1000 authors (~80 KB each) and never reads them,
    // more than the kernel's socket buffers and a 4 MiB server-side send queue together hold.
    slow = await openClient(server.wsUrl, token)
    slow.pause()
    for (let i = 0; i < SLOW_PAGES; i++) slow.send(JSON.stringify({ pkg_id: 2, req_id: randomUUID(), data: { page: 1 + (i % 10), per_page: 1000 } }))
    // Let the server work through those requests first (up to 60 s): what is measured next is the
    // effect of a client that does not read, not of the database work it asked for.
    await sleep(3000)
    await settle(server.pid, 60_000)
    const with_slow_client = await timeBroadcasts(server, clients, token, events, "slow")
    const active_after_slow = await activeConnections(server)
    return {
      clients: clients.length, connect_s, normal, with_slow_client, slow_client_requested_mb: Math.round((SLOW_PAGES * 80) / 1024),
      active_before_slow, active_after_slow, rss_mb: rssMb(server.pid)
    }
  } finally {
    slow?.terminate()
    await closeClients(clients)
  }
}

export interface IdleResult {
  readonly connections: number
  readonly connect_s: number
  readonly rss_before_mb: number | undefined
  readonly rss_with_mb: number | undefined
  readonly kb_per_connection: number | undefined
  readonly w6_idle: Omit<RoundResult, "latencies">
  readonly w6_with_connections: Omit<RoundResult, "latencies">
  readonly p50_ratio: number
  readonly p99_ratio: number
}

const strip = ({ latencies: _latencies, ...rest }: RoundResult) => rest

export const measureIdle = async (server: Server, tokens: ReadonlyArray<string>, count: number, w6: HttpSpec, seconds: number): Promise<IdleResult> => {
  await settle(server.pid)
  const idle = await runHttp(server.url, w6, seconds)
  // Both RSS readings after the same pause (RSS moves with garbage collection: read it as ±10 MB).
  await sleep(2000)
  await settle(server.pid)
  const rss_before_mb = rssMb(server.pid)
  const t0 = performance.now()
  const clients = await openClients(server.wsUrl, tokens, count, 200)
  const connect_s = (performance.now() - t0) / 1000
  try {
    await sleep(2000)
    await settle(server.pid)
    const rss_with_mb = rssMb(server.pid)
    const loaded = await runHttp(server.url, w6, seconds)
    return {
      connections: clients.length,
      connect_s,
      rss_before_mb,
      rss_with_mb,
      kb_per_connection: rss_before_mb === undefined || rss_with_mb === undefined ? undefined : Math.round(((rss_with_mb - rss_before_mb) * 1024) / count * 10) / 10,
      w6_idle: strip(idle),
      w6_with_connections: strip(loaded),
      p50_ratio: loaded.p50 / idle.p50,
      p99_ratio: loaded.p99 / idle.p99
    }
  } finally {
    await closeClients(clients)
  }
}
