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

export type Workload =
  | {
    readonly id: string
    readonly kind: "http"
    readonly title: string
    readonly connections: number
    readonly spec: (ctx: Context, server: Server) => Promise<HttpSpec>
  }
  | {
    readonly id: string
    readonly kind: "ws"
    readonly title: string
    readonly connections: number
    readonly request: (ctx: Context) => () => { pkg_id: number; data: unknown }
  }

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
    id: "W9", kind: "http", connections: 64,
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
    id: "W2", kind: "http", connections: 16, title: "POST /authors (unique names)",
    spec: async (ctx, server) => {
      let n = 0
      const prefix = `bench ${ctx.runId} ${server.name}`
      return { connections: 16, tokens: ctx.tokens, next: () => ({ method: "POST", path: "/authors", body: JSON.stringify({ name: `${prefix} ${n++}` }) }) }
    }
  }
]

/** W6's spec again, for the idle-connections test. */
export const w6Spec = (ctx: Context): HttpSpec => get(64, ctx.tokens, () => `/authors?id=${1 + rand(ctx.authors)}`)
