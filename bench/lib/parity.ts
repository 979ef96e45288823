/**
 * Keeping the baseline honest, checked on every run:
 * 1. code: the pieces bench/baseline/shared.ts copies from src/ still behave identically
 *    (limiter script, LIKE escaping, cursor encoding, date parsing, request data capture);
 * 2. answers: both servers, on identical data, give the same status and body for sample
 *    requests of every workload (same SQL → same rows, totals, cursors and formatting).
 */
import { Option } from "effect"
import { readFileSync } from "node:fs"
import { isDeepStrictEqual } from "node:util"
import { parseIsoDate as svcParseIsoDate } from "../../src/AuditLogs/Api.ts"
import { captureRequestData as svcCapture } from "../../src/AuditLogs/RequestData.ts"
import { likePattern as svcLikePattern } from "../../src/Authors/Repo.ts"
import { decodeCursor as svcDecodeCursor, encodeCursor as svcEncodeCursor } from "../../src/Domain/Pagination.ts"
import { SLIDING_WINDOW_LUA as svcLua } from "../../src/RateLimit/RedisRateLimiter.ts"
import * as base from "../baseline/shared.ts"
import { openClient, parseJson } from "./load.ts"
import type { Server } from "./servers.ts"

export const checkCodeParity = (): Array<string> => {
  const problems: Array<string> = []
  const same = (what: string, a: unknown, b: unknown) => {
    if (!isDeepStrictEqual(a, b)) problems.push(`${what}: service ${JSON.stringify(a)} ≠ baseline ${JSON.stringify(b)}`)
  }
  same("SLIDING_WINDOW_LUA", svcLua, base.SLIDING_WINDOW_LUA)
  for (const term of ["abc", "50%_off", "back\\slash", "", "Ünï"]) same(`likePattern(${term})`, svcLikePattern(term), base.likePattern(term))
  for (const id of [0, 1, 42, 999_999, 2 ** 40]) same(`encodeCursor(${id})`, svcEncodeCursor(id), base.encodeCursor(id))
  for (const c of ["YToxMA", "YTox", "bad!", "YTotMQ", base.encodeCursor(123)]) {
    same(`decodeCursor(${c})`, Option.getOrUndefined(svcDecodeCursor(c)), base.decodeCursor(c))
  }
  for (const d of ["2026-01-31", "2026-01-31T10:11:12Z", "2026-01-31T10:11:12.5+02:00", "2026-02-30", "nope"]) {
    for (const end of [false, true]) same(`parseIsoDate(${d}, ${end})`, svcParseIsoDate(d, end)?.getTime(), base.parseIsoDate(d, end)?.getTime())
  }
  const big = { name: "x".repeat(9000) }
  for (const [q, b] of [[{ page: "2" }, undefined], [undefined, { name: "a", password: "p", nested: { token: "t" } }], [{ q: "1" }, big]] as const) {
    same(`captureRequestData(${JSON.stringify(q)}, …)`, svcCapture(q, b), base.captureRequestData(q, b))
  }
  problems.push(...checkSqlText())
  return problems
}

const ORDER_BY = /ORDER BY [\w."]+(?: (?:ASC|DESC))?(?:, [\w."]+(?: (?:ASC|DESC))?)*/g

/** The baseline's SQL fragments appear verbatim in the repositories, and they order rows the same way. */
const checkSqlText = (): Array<string> => {
  const problems: Array<string> = []
  // Without comments (a comment may say "ORDER BY would …").
  const source = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "")
  const authors = source("src/Authors/Repo.ts")
  const audit = source("src/AuditLogs/Repo.ts")
  const expect = (file: string, text: string, fragment: string) => {
    if (!text.includes(fragment)) problems.push(`${file} no longer contains the baseline's SQL ${JSON.stringify(fragment)}`)
  }
  for (const f of [base.SQL.authorColumns, base.SQL.authorsTotal, base.SQL.countTotal, base.SQL.pageColumns, base.SQL.pageWithTotal, base.SQL.pageJoin]) {
    expect("src/Authors/Repo.ts", authors, f)
  }
  for (const f of [base.SQL.auditTimestamp, base.SQL.auditOrderBy, base.SQL.countTotal, base.SQL.auditConflict]) expect("src/AuditLogs/Repo.ts", audit, f)
  const orders = (text: string) => [...new Set(text.match(ORDER_BY) ?? [])]
  same2("src/Authors/Repo.ts ORDER BY", orders(authors).sort(), [base.SQL.authorsOrderBy, base.SQL.pageOrderBy].sort(), problems)
  same2("src/AuditLogs/Repo.ts ORDER BY", orders(audit), [base.SQL.auditOrderBy], problems)
  return problems
}

const same2 = (what: string, a: unknown, b: unknown, problems: Array<string>) => {
  if (!isDeepStrictEqual(a, b)) problems.push(`${what}: service ${JSON.stringify(a)} ≠ baseline ${JSON.stringify(b)}`)
}

interface Sample {
  readonly label: string
  readonly path: string
  readonly method?: "GET" | "POST"
  readonly body?: unknown
}

const call = async (server: Server, token: string, s: Sample) => {
  const res = await fetch(`${server.url}${s.path}`, {
    method: s.method ?? "GET",
    headers: { authorization: `Bearer ${token}`, "x-correlation-id": "bench-parity", ...(s.body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(s.body !== undefined ? { body: JSON.stringify(s.body) } : {})
  })
  return { status: res.status, correlation: res.headers.get("x-correlation-id"), body: parseJson(await res.text()) }
}

/** Same request to both servers; returns the differences (empty when they answer alike). */
export const checkAnswers = async (service: Server, baseline: Server, token: string, samples: ReadonlyArray<Sample>): Promise<Array<string>> => {
  const problems: Array<string> = []
  for (const s of samples) {
    const [a, b] = [await call(service, token, s), await call(baseline, token, s)]
    if (a.status !== b.status) problems.push(`${s.label}: status ${a.status} vs ${b.status}`)
    else if (!isDeepStrictEqual(a.body, b.body)) problems.push(`${s.label}: bodies differ: ${JSON.stringify(a.body).slice(0, 200)} vs ${JSON.stringify(b.body).slice(0, 200)}`)
    if (a.correlation !== "bench-parity" || b.correlation !== "bench-parity") problems.push(`${s.label}: correlation id not echoed (${a.correlation} / ${b.correlation})`)
  }
  return problems
}

/** One package-2 round trip over WS on each server; compares data and meta. */
export const checkWsAnswers = async (service: Server, baseline: Server, token: string): Promise<Array<string>> => {
  const ask = async (server: Server) => {
    const ws = await openClient(server.wsUrl, token, 5000)
    try {
      return await new Promise<unknown>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("no answer in 5 s")), 5000)
        ws.on("message", (raw: Buffer) => {
          const m = parseJson(raw.toString())
          if (typeof m === "object" && m !== null && (m as Record<string, unknown>)["req_id"] === "6c0a7b8e-0000-4000-8000-000000000001") {
            clearTimeout(timer)
            const { data, meta, status_code } = m as Record<string, unknown>
            resolve({ status_code, data, meta })
          }
        })
        ws.send(JSON.stringify({ pkg_id: 2, req_id: "6c0a7b8e-0000-4000-8000-000000000001", data: { page: 3, per_page: 5 } }))
      })
    } finally {
      ws.terminate()
    }
  }
  const results = await Promise.allSettled([ask(service), ask(baseline)])
  const [a, b] = results
  if (a.status === "rejected" || b.status === "rejected") {
    return [`ws package 2: not compared (${a.status === "rejected" ? `service: ${String(a.reason)}` : ""}${b.status === "rejected" ? ` baseline: ${String(b.reason)}` : ""})`]
  }
  return isDeepStrictEqual(a.value, b.value) ? [] : [`ws package 2: answers differ: ${JSON.stringify(a.value).slice(0, 200)} vs ${JSON.stringify(b.value).slice(0, 200)}`]
}
