/**
 * Parity by answers: the two servers are written differently (the baseline has its own schema,
 * SQL and code), so what keeps the comparison honest is that they give the same answers. Sample
 * requests of every workload go to both, on identical data:
 * - a success (2xx, WebSocket status_code 0): status and body identical, except the opaque
 *   `next_cursor` (compared as present or null: each server has its own format) and the fields
 *   a sample marks volatile (a created author's `created_at`: checked for its format only);
 * - an error: status only (422 bodies, for one, are each server's own wording);
 * - both echo the correlation id, and a success carries a request id and the rate-limit headers.
 */
import { type WebSocket } from "ws"
import { type Answer, compareAnswers, RATE_LIMIT_HEADERS } from "./compare.ts"
import { openClient, parseJson } from "./load.ts"
import type { Server } from "./servers.ts"

export interface Sample {
  readonly label: string
  readonly method?: "GET" | "POST" | "PUT" | "DELETE"
  /** A path, or one computed on each server from its own answers (a cursor is each server's own). */
  readonly path: string | ((get: (path: string) => Promise<unknown>) => Promise<string>)
  readonly body?: unknown
  /** Which token: the bench user's (every role, default), one with `get-authors` only, or none. */
  readonly as?: "bench" | "reader" | "anonymous"
  readonly volatile?: Readonly<Record<string, RegExp>>
}

export interface Tokens {
  readonly bench: string
  readonly reader: string
}

const call = async (server: Server, tokens: Tokens, s: Sample): Promise<Answer> => {
  const token = s.as === "anonymous" ? undefined : tokens[s.as ?? "bench"]
  const auth: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` }
  const get = async (path: string) => {
    const res = await fetch(`${server.url}${path}`, { headers: auth })
    if (res.status !== 200) throw new Error(`GET ${path} answered ${res.status}`)
    return res.json()
  }
  const path = typeof s.path === "string" ? s.path : await s.path(get)
  const res = await fetch(`${server.url}${path}`, {
    method: s.method ?? "GET",
    headers: { ...auth, "x-correlation-id": "bench-parity", ...(s.body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(s.body !== undefined ? { body: JSON.stringify(s.body) } : {})
  })
  const headers: Record<string, string | null> = {}
  for (const h of ["x-correlation-id", "x-request-id", ...RATE_LIMIT_HEADERS]) headers[h] = res.headers.get(h)
  return { status: res.status, body: parseJson(await res.text()), headers }
}

export interface ParityResult {
  readonly compared: number
  readonly problems: ReadonlyArray<string>
}

/** Each sample to the service, then to the baseline (in order: a create changes what later samples see). */
export const checkAnswers = async (service: Server, baseline: Server, tokens: Tokens, samples: ReadonlyArray<Sample>): Promise<ParityResult> => {
  const problems: Array<string> = []
  for (const s of samples) {
    try {
      const a = await call(service, tokens, s)
      const b = await call(baseline, tokens, s)
      problems.push(...compareAnswers(s.label, a, b, s.volatile))
    } catch (error) {
      problems.push(`${s.label}: not compared (${error instanceof Error ? error.message : String(error)})`)
    }
  }
  return { compared: samples.length, problems }
}

/** The sample requests: every workload's kind of request, the errors they can meet, a create, a rename and a delete. */
export const paritySamples = (authors: number, anchor: Date, runId: string): Array<Sample> => {
  const DAY = 86_400_000
  const range = `start_date=${encodeURIComponent(new Date(anchor.getTime() - 90 * DAY).toISOString())}&end_date=${encodeURIComponent(new Date(anchor.getTime() - 30 * DAY).toISOString())}`
  const pagesOf = async (get: (path: string) => Promise<unknown>) => ((await get("/authors/paginated?per_page=20")) as { meta: { pages: number } }).meta.pages
  const cursorOf = async (get: (path: string) => Promise<unknown>, path: string) => {
    const cursor = ((await get(path)) as { meta: { next_cursor: string | null } }).meta.next_cursor
    if (cursor === null) throw new Error(`${path} gave no next_cursor`)
    return encodeURIComponent(cursor)
  }
  const name = `bench ${runId} parity`
  return [
    { label: "W1 page 7", path: "/authors/paginated?page=7&per_page=20" },
    { label: "W1 page 50", path: "/authors/paginated?page=50&per_page=20" },
    { label: "W1 defaults", path: "/authors/paginated" },
    { label: "per_page over 1000 (clamped)", path: "/authors/paginated?page=2&per_page=1500" },
    { label: "page past the end", path: `/authors/paginated?page=${Math.ceil(authors / 20) + 5}&per_page=20` },
    { label: "W4 last page (offset)", path: async (get) => `/authors/paginated?page=${await pagesOf(get)}&per_page=20` },
    { label: "W4 last page (cursor)", path: async (get) => `/authors/paginated?per_page=20&cursor=${await cursorOf(get, `/authors/paginated?page=${(await pagesOf(get)) - 1}&per_page=20`)}` },
    { label: "cursor after page 1", path: async (get) => `/authors/paginated?per_page=20&cursor=${await cursorOf(get, "/authors/paginated?page=1&per_page=20")}` },
    { label: "page filtered by id", path: "/authors/paginated?id=42" },
    { label: "W5 search", path: "/authors?search=ame" },
    { label: "W5 search, other case", path: "/authors?search=AME" },
    { label: "W5 search (escaped % and _)", path: "/authors?search=%25_a" },
    { label: "W6 by id", path: "/authors?id=42" },
    { label: "W6/W9 id past the end", path: `/authors?id=${authors + 150}` },
    { label: "name, exact", path: async (get) => `/authors?name=${encodeURIComponent(((await get("/authors?id=5")) as Array<{ name: string }>)[0]!.name)}` },
    { label: "W8 user + range", path: `/audit-logs?user_id=user-42&${range}` },
    { label: "W8 page 2", path: `/audit-logs?user_id=user-42&${range}&page=2&per_page=5` },
    { label: "W8 action + outcome + range", path: `/audit-logs?action_type=POST&outcome=error&${range}` },
    { label: "422 page=0", path: "/authors/paginated?page=0" },
    { label: "422 per_page=abc", path: "/authors/paginated?per_page=abc" },
    { label: "422 id=abc", path: "/authors?id=abc" },
    { label: "422 bad cursor", path: "/authors/paginated?cursor=%21%21" },
    { label: "422 audit per_page=101", path: "/audit-logs?per_page=101" },
    { label: "401 no token", path: "/authors?id=1", as: "anonymous" },
    { label: "403 audit without admin", path: "/audit-logs", as: "reader" },
    { label: "404 unknown path", path: "/nope" },
    { label: "422 create, empty name", method: "POST", path: "/authors", body: { name: "   " } },
    { label: "W2/W9 create", method: "POST", path: "/authors", body: { name: `  ${name}  ` }, volatile: { created_at: /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}$/ } },
    { label: "409 create, same name", method: "POST", path: "/authors", body: { name } },
    { label: "the create, read back", path: `/authors?id=${authors + 1}`, volatile: { created_at: /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}$/ } },
    // W10: a rename of a seeded author (its created_at is the same on both), then the delete of the one created above.
    { label: "W10 rename", method: "PUT", path: "/authors/43", body: { name: `  ${name} renamed  ` } },
    { label: "the rename, read back", path: "/authors?id=43" },
    { label: "409 rename to a taken name", method: "PUT", path: "/authors/44", body: { name } },
    { label: "404 rename, no such author", method: "PUT", path: `/authors/${authors + 100_000}`, body: { name: `${name} nobody` } },
    { label: "422 rename, empty name", method: "PUT", path: "/authors/44", body: { name: "" } },
    { label: "422 rename, id not an integer", method: "PUT", path: "/authors/abc", body: { name: `${name} abc` } },
    { label: "403 delete without delete-author", method: "DELETE", path: "/authors/44", as: "reader" },
    { label: "W10 delete", method: "DELETE", path: `/authors/${authors + 1}` },
    { label: "404 delete, again", method: "DELETE", path: `/authors/${authors + 1}` },
    { label: "the delete, read back", path: `/authors?id=${authors + 1}` },
    { label: "404 delete, id past 32 bits", method: "DELETE", path: "/authors/4294967296" }
  ]
}

export interface WsSample {
  readonly label: string
  readonly data: unknown
}

export const WS_SAMPLES: ReadonlyArray<WsSample> = [
  { label: "W3 package 2", data: { page: 3, per_page: 5 } },
  { label: "W3 package 2, name filter", data: { page: 1, per_page: 10, filters: { name: "ame" } } },
  { label: "W3 package 2, id filter", data: { page: 1, per_page: 20, filters: { id: 42 } } },
  { label: "W3 package 2, invalid page", data: { page: 0, per_page: 5 } }
]

const ask = (ws: WebSocket, reqId: string, data: unknown) =>
  new Promise<Answer>((resolve, reject) => {
    const timer = setTimeout(() => {
      ws.off("message", onMessage)
      reject(new Error("no answer in 5 s"))
    }, 5000)
    const onMessage = (raw: Buffer) => {
      const m = parseJson(raw.toString())
      if (typeof m !== "object" || m === null || (m as Record<string, unknown>)["req_id"] !== reqId) return
      clearTimeout(timer)
      ws.off("message", onMessage)
      const { status_code, data, meta, pkg_id } = m as Record<string, unknown>
      // As HTTP: status_code 0 is a success (compared whole), any other an error (compared by code).
      resolve({ status: status_code === 0 ? 200 : 400 + Number(status_code), body: { pkg_id, req_id: reqId, data, meta } })
    }
    ws.on("message", onMessage)
    ws.send(JSON.stringify({ pkg_id: 2, req_id: reqId, data }))
  })

/** Package-2 round trips over one connection to each server. */
export const checkWsAnswers = async (service: Server, baseline: Server, token: string): Promise<ParityResult> => {
  const problems: Array<string> = []
  const open = async (s: Server) => openClient(s.wsUrl, token, 5000).catch((error: unknown) => error instanceof Error ? error : new Error(String(error)))
  const [a, b] = [await open(service), await open(baseline)]
  try {
    if (a instanceof Error || b instanceof Error) {
      return { compared: 0, problems: [`WebSocket: not compared (${a instanceof Error ? `service: ${a.message} ` : ""}${b instanceof Error ? `baseline: ${b.message}` : ""})`] }
    }
    for (const [i, s] of WS_SAMPLES.entries()) {
      const reqId = `6c0a7b8e-0000-4000-8000-${String(i + 1).padStart(12, "0")}`
      try {
        const [x, y] = [await ask(a, reqId, s.data), await ask(b, reqId, s.data)]
        problems.push(...compareAnswers(s.label, x, y).map((p) => p.replace(/status (\d+)/g, (_m, n: string) => `status_code ${Number(n) === 200 ? 0 : Number(n) - 400}`)))
      } catch (error) {
        problems.push(`${s.label}: not compared (${error instanceof Error ? error.message : String(error)})`)
      }
    }
    return { compared: WS_SAMPLES.length, problems }
  } finally {
    if (!(a instanceof Error)) a.terminate()
    if (!(b instanceof Error)) b.terminate()
  }
}
