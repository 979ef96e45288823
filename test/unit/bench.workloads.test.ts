/**
 * W10 (bench/README.md#workloads) deletes only authors it created for itself, through the
 * server's own API before each run, topped up from the rate the last run asked for. These pin
 * that bookkeeping against a stand-in server that creates authors, without a database.
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { HttpRequest } from "../../bench/lib/load.ts"
import type { Server } from "../../bench/lib/servers.ts"
import { WORKLOADS } from "../../bench/lib/workloads.ts"

let nextId = 1000
const created: Array<number> = []
const stand = createServer((req, res) => {
  let body = ""
  req.on("data", (chunk: Buffer) => (body += chunk.toString()))
  req.on("end", () => {
    const id = nextId++
    created.push(id)
    res.writeHead(201, { "content-type": "application/json" })
    res.end(JSON.stringify({ id, name: (JSON.parse(body) as { name: string }).name, created_at: "2026-11-29T00:00:00.000000" }))
  })
})
let server: Server

beforeAll(async () => {
  await new Promise<void>((resolve) => stand.listen(0, "127.0.0.1", resolve))
  const url = `http://127.0.0.1:${(stand.address() as AddressInfo).port}`
  server = { name: "baseline", url, wsUrl: url.replace("http", "ws"), pid: 0, alive: () => true, exitReason: () => undefined, output: () => "", stop: async () => {} }
})
afterAll(() => new Promise<void>((resolve) => stand.close(() => resolve())))

describe("bench W10: renames and deletes", () => {
  it("deletes each author made for it once, renames only seeded ones, and makes enough for the rate the last run asked for", async () => {
    const w10 = WORKLOADS.find((w) => w.id === "W10")
    if (w10?.kind !== "http") throw new Error("W10 is an HTTP workload")
    expect(w10.writes).toEqual(["rename", "delete"])
    const spec = await w10.spec({ tokens: ["t"], authors: 500, anchor: new Date(), runId: "r" }, server)

    // Before the first run: 1,000 deletes per second assumed, for 0.3 s, a third more, and 100.
    expect(await spec.prepare!(0.3)).toMatch(/^created 500 authors to delete/)
    expect(created).toHaveLength(500)
    const requests: Array<HttpRequest> = Array.from({ length: 1200 }, () => spec.next())
    const deletes = requests.filter((r) => r.method === "DELETE").map((r) => Number(r.path.split("/")[2]))
    const renames = requests.filter((r) => r.method === "PUT")
    expect(deletes.length + renames.length).toBe(1200)
    expect(deletes.length).toBeGreaterThan(500) // more than it made: the rest go to ids no author has (404s)
    const sorted = (ids: ReadonlyArray<number>) => [...ids].sort((a, b) => a - b)
    expect(sorted(deletes.slice(0, 500))).toEqual(sorted(created)) // in the order the creates were answered
    expect(new Set(deletes).size).toBe(deletes.length)
    expect(deletes.slice(500).every((id) => id >= 2_000_000_000)).toBe(true)
    for (const r of renames) {
      const id = Number(r.path.split("/")[2])
      expect(id >= 1 && id <= 500).toBe(true)
    }
    expect(new Set(renames.map((r) => (JSON.parse(r.body!) as { name: string }).name)).size).toBe(renames.length)

    // The next run of 1 s: as many deletes per second as the last 0.3 s asked for, a third more, and 100.
    const wanted = Math.ceil((deletes.length / 0.3) * (4 / 3)) + 100
    expect(await spec.prepare!(1)).toMatch(new RegExp(`^created ${wanted} authors to delete`))
    const next = Array.from({ length: 50 }, () => spec.next()).filter((r) => r.method === "DELETE").map((r) => Number(r.path.split("/")[2]))
    expect(next.length).toBeGreaterThan(0)
    expect(next.every((id) => created.indexOf(id) >= 500)).toBe(true)
    expect(new Set([...deletes, ...next]).size).toBe(deletes.length + next.length)
  })
})
