/**
 * The workloads of the issue (bench/README.md). Each one builds, per server, what to send:
 * an HTTP spec for autocannon or a WebSocket request maker. W7 and the idle test are separate
 * (bench/lib/fanout.ts).
 */
import { NAME_ALPHABET } from "../seed.ts"
import type { HttpSpec } from "./load.ts"
import type { Server } from "./servers.ts"

export interface Context {
  readonly tokens: ReadonlyArray<string>
  readonly authors: number
  readonly anchor: Date
  readonly runId: string
}

/** The `operation` labels of the service's `author_write_batch_size` histogram (bench/README.md#batches). */
export type WriteOperation = "create" | "rename" | "delete"

interface Common {
  readonly id: string
  readonly title: string
  readonly connections: number
  /** The writes it makes, whose batch sizes the report shows. */
  readonly writes?: ReadonlyArray<WriteOperation>
}

export type Workload =
  | Common & { readonly kind: "http"; readonly spec: (ctx: Context, server: Server) => Promise<HttpSpec> }
  | Common & { readonly kind: "ws"; readonly request: (ctx: Context) => () => { pkg_id: number; data: unknown } }

const rand = (n: number) => Math.floor(Math.random() * n)
const DAY = 86_400_000

const getJson = async (server: Server, token: string, path: string): Promise<unknown> => {
  const res = await fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${token}` } })
  if (res.status !== 200) throw new Error(`GET ${path} answered ${res.status}`)
  return res.json()
}

/**
 * The last page of the table as it is now on this server (W2 may have grown it): its number, and a
 * cursor to it — the server's own (each server's cursor is opaque): `next_cursor` of the page before.
 */
const lastPage = async (ctx: Context, server: Server) => {
  const token = ctx.tokens[0]!
  const first = await getJson(server, token, "/authors/paginated?page=1&per_page=20") as { meta: { pages: number } }
  const pages = first.meta.pages
  if (pages < 2) throw new Error("fewer than two pages of authors")
  const before = await getJson(server, token, `/authors/paginated?page=${pages - 1}&per_page=20`) as { meta: { next_cursor: string | null } }
  const cursor = before.meta.next_cursor
  if (cursor === null) throw new Error(`page ${pages - 1} has no next_cursor`)
  return { pages, cursor: encodeURIComponent(cursor) }
}

const get = (connections: number, tokens: ReadonlyArray<string>, path: () => string): HttpSpec => ({ connections, tokens, next: () => ({ method: "GET", path: path() }) })

export const WORKLOADS: ReadonlyArray<Workload> = [
  {
    id: "W1", kind: "http", connections: 64, title: "GET /authors/paginated?page=rand(1..50)&per_page=20",
    spec: async (ctx) => get(64, ctx.tokens, () => `/authors/paginated?page=${1 + rand(50)}&per_page=20`)
  },
  {
    id: "W4-offset", kind: "http", connections: 64, title: "GET /authors/paginated — last page by offset",
    spec: async (ctx, server) => {
      const { pages } = await lastPage(ctx, server)
      return get(64, ctx.tokens, () => `/authors/paginated?page=${pages}&per_page=20`)
    }
  },
  {
    id: "W4-cursor", kind: "http", connections: 64, title: "GET /authors/paginated — last page by cursor",
    spec: async (ctx, server) => {
      const { cursor } = await lastPage(ctx, server)
      return get(64, ctx.tokens, () => `/authors/paginated?per_page=20&cursor=${cursor}`)
    }
  },
  {
    id: "W5", kind: "http", connections: 64, title: "GET /authors?search=<3 letters>",
    spec: async (ctx) => get(64, ctx.tokens, () => `/authors?search=${Array.from({ length: 3 }, () => NAME_ALPHABET[rand(NAME_ALPHABET.length)]).join("")}`)
  },
  {
    id: "W6", kind: "http", connections: 64, title: "GET /authors?id=<random> (thin request)",
    spec: async (ctx) => get(64, ctx.tokens, () => `/authors?id=${1 + rand(ctx.authors)}`)
  },
  {
    id: "W8", kind: "http", connections: 64, title: "GET /audit-logs?user_id=<random>&start_date&end_date (60 days)",
    spec: async (ctx) => {
      const from = encodeURIComponent(new Date(ctx.anchor.getTime() - 90 * DAY).toISOString())
      const to = encodeURIComponent(new Date(ctx.anchor.getTime() - 30 * DAY).toISOString())
      return get(64, ctx.tokens, () => `/audit-logs?user_id=user-${rand(10_000)}&start_date=${from}&end_date=${to}`)
    }
  },
  {
    id: "W3", kind: "ws", connections: 64, title: "WS package 2 (GET_PAGINATED_AUTHORS page=rand(1..50)) round trips, 1 in flight per connection",
    request: () => () => ({ pkg_id: 2, data: { page: 1 + rand(50), per_page: 20 } })
  },
  {
    id: "W9", kind: "http", connections: 64, writes: ["create"],
    title: "mixed: 45 % GET /authors?id=rand(1..N+200), 45 % GET /authors/paginated?page=rand(1..50)&per_page=20, 10 % POST /authors",
    spec: async (ctx, server) => {
      let n = 0
      const prefix = `bench ${ctx.runId} ${server.name} mixed`
      return {
        connections: 64,
        tokens: ctx.tokens,
        next: () => {
          const r = Math.random()
          if (r < 0.45) return { method: "GET", path: `/authors?id=${1 + rand(ctx.authors + 200)}` }
          if (r < 0.9) return { method: "GET", path: `/authors/paginated?page=${1 + rand(50)}&per_page=20` }
          return { method: "POST", path: "/authors", body: JSON.stringify({ name: `${prefix} ${n++}` }) }
        }
      }
    }
  },
  {
    id: "W2", kind: "http", connections: 16, title: "POST /authors (unique names)", writes: ["create"],
    spec: async (ctx, server) => creates(16, `bench ${ctx.runId} ${server.name}`, ctx.tokens)
  },
  {
    id: "W2b", kind: "http", connections: 64, title: "POST /authors (unique names), 64 connections", writes: ["create"],
    spec: async (ctx, server) => creates(64, `bench ${ctx.runId} ${server.name} w2b`, ctx.tokens)
  },
  {
    id: "W10", kind: "http", connections: 16, writes: ["rename", "delete"],
    title: "renames and deletes: 50 % PUT /authors/rand(1..N) (a new unique name), 50 % DELETE /authors/{id} of an author created for it",
    spec: async (ctx, server) => renamesAndDeletes(ctx, server)
  }
]

const creates = (connections: number, prefix: string, tokens: ReadonlyArray<string>): HttpSpec => {
  let n = 0
  return { connections, tokens, next: () => ({ method: "POST", path: "/authors", body: JSON.stringify({ name: `${prefix} ${n++}` }) }) }
}

/**
 * Creates `count` authors through the server's own API (32 at a time) and returns their ids: W10's
 * deletes remove authors made this way, before the round, so a round measures deletes only.
 */
const createAuthors = async (server: Server, tokens: ReadonlyArray<string>, count: number, prefix: string): Promise<Array<number>> => {
  const ids: Array<number> = []
  let next = 0
  const worker = async () => {
    while (next < count) {
      const i = next++
      const res = await fetch(`${server.url}/authors`, {
        method: "POST",
        headers: { authorization: `Bearer ${tokens[i % tokens.length]}`, "content-type": "application/json" },
        body: JSON.stringify({ name: `${prefix} ${i}` }),
        signal: AbortSignal.timeout(10_000)
      })
      if (res.status !== 201) throw new Error(`POST /authors answered ${res.status} while creating W10's authors to delete`)
      ids.push(((await res.json()) as { id: number }).id)
    }
  }
  await Promise.all(Array.from({ length: Math.min(32, count) }, worker))
  return ids
}

/** Deletes per second assumed before the first run of W10 has shown its rate. */
const FIRST_DELETE_RATE = 1000

/**
 * W10: renames of seeded authors (ids 1…N) to new unique names and deletes of authors created for
 * it, half and half. Before each run `prepare` tops up the authors to delete: the deletes the last
 * run asked for per second, times this run's seconds, a third more. A run that wants more deletes
 * than there are authors to delete sends the rest to ids no author has: their 404s show as errors.
 */
const renamesAndDeletes = (ctx: Context, server: Server): HttpSpec => {
  const prefix = `bench ${ctx.runId} ${server.name} w10`
  let targets: Array<number> = []
  let head = 0
  let renamed = 0
  let made = 0
  let gone = 0
  let wanted = 0
  let lastSeconds: number | undefined
  return {
    connections: 16,
    tokens: ctx.tokens,
    prepare: async (seconds) => {
      const rate = lastSeconds === undefined || lastSeconds === 0 ? FIRST_DELETE_RATE : wanted / lastSeconds
      targets = targets.slice(head)
      head = 0
      wanted = 0
      lastSeconds = seconds
      const missing = Math.ceil(rate * seconds * 4 / 3) + 100 - targets.length
      if (missing <= 0) return undefined
      const started = performance.now()
      targets.push(...await createAuthors(server, ctx.tokens, missing, `${prefix} to delete ${made}`))
      made += missing
      return `created ${missing} authors to delete in ${((performance.now() - started) / 1000).toFixed(1)} s (${Math.round(rate)} deletes/s expected)`
    },
    next: () => {
      if (Math.random() < 0.5) {
        wanted++
        // Past the authors made for it: an id no author has (a 404, counted as an error).
        const id = head < targets.length ? targets[head++]! : 2_000_000_000 + gone++
        return { method: "DELETE", path: `/authors/${id}` }
      }
      return { method: "PUT", path: `/authors/${1 + rand(ctx.authors)}`, body: JSON.stringify({ name: `${prefix} ${renamed++}` }) }
    }
  }
}

/** W6's spec again, for the idle-connections test. */
export const w6Spec = (ctx: Context): HttpSpec => get(64, ctx.tokens, () => `/authors?id=${1 + rand(ctx.authors)}`)
