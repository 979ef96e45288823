/**
 * The workloads of the issue (bench/README.md). Each one builds, per server, what to send:
 * an HTTP spec for autocannon or a WebSocket request maker. W7 and the idle test are separate
 * (bench/lib/fanout.ts).
 */
import { encodeCursor } from "../../src/Domain/Pagination.ts"
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

/** The last page of the table as it is now on this server (W2 may have grown it): page number and a cursor to it. */
const lastPage = async (ctx: Context, server: Server) => {
  const token = ctx.tokens[0]!
  const first = await getJson(server, token, "/authors/paginated?page=1&per_page=20") as { meta: { pages: number } }
  const pages = first.meta.pages
  const last = await getJson(server, token, `/authors/paginated?page=${pages}&per_page=20`) as { items: Array<{ id: number }> }
  const firstId = last.items[0]?.id
  if (firstId === undefined) throw new Error("empty table")
  return { pages, cursor: encodeCursor(firstId - 1) }
}

const get = (connections: number, tokens: ReadonlyArray<string>, path: () => string): HttpSpec => ({ method: "GET", connections, tokens, path })

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
    id: "W2", kind: "http", connections: 16, title: "POST /authors (unique names)",
    spec: async (ctx, server) => {
      let n = 0
      const prefix = `bench ${ctx.runId} ${server.name}`
      return { method: "POST", connections: 16, tokens: ctx.tokens, path: () => "/authors", body: () => JSON.stringify({ name: `${prefix} ${n++}` }) }
    }
  }
]

/** W6's spec again, for the idle-connections test. */
export const w6Spec = (ctx: Context): HttpSpec => get(64, ctx.tokens, () => `/authors?id=${1 + rand(ctx.authors)}`)
