/**
 * The real service as a child process for fault tests (Spawn.ts), with what those tests share:
 * its own DATA_DIR, waiting for /readyz, SIGTERM with the exit code and its time, the JSON log
 * lines it wrote, and a paced load of authenticated requests that records every answer.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { scrapeMetrics } from "./Metrics.ts"
import { freePort, spawnService, type Spawned } from "./Spawn.ts"
import { eventually } from "./Eventually.ts"
import { hostPort, startTcpProxy, type TcpProxy } from "./TcpProxy.ts"
import { createPostgresDatabase, TEST_DATABASE_URL, type TestDatabase } from "./TestApp.ts"

export interface Running {
  readonly url: string
  readonly service: Spawned
}

/** Cleanups a test registers (run newest first by the test file's `afterEach`). */
export type Cleanups = Array<() => Promise<void>>

export const runCleanups = async (cleanups: Cleanups) => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
}

/** A fresh database on TEST_DATABASE_URL's server, reached through a TCP proxy the test can cut or blackhole. */
export const proxiedDatabase = async (cleanups: Cleanups): Promise<{ db: TestDatabase; proxy: TcpProxy }> => {
  const db = await createPostgresDatabase(TEST_DATABASE_URL!)
  const { host, port } = hostPort(db.url!)
  const proxy = await startTcpProxy(host, port)
  cleanups.push(async () => {
    await proxy.close()
    await db.dispose()
  })
  return { db, proxy }
}

/** Starts the service with `env` (rate limit off and only errors logged unless `env` says otherwise) and waits until it is ready. */
export const startService = async (env: Record<string, string>, cleanups: Cleanups): Promise<Running> => {
  const dataDir = mkdtempSync(join(tmpdir(), "ads-fault-"))
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const service = spawnService({ PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, RATE_LIMIT_ENABLED: "false", LOG_LEVEL: "error", ...env })
  cleanups.push(async () => {
    if (service.child.exitCode === null && service.child.signalCode === null) {
      service.child.kill("SIGKILL")
      await service.exited
    }
    rmSync(dataDir, { recursive: true, force: true })
  })
  await eventually(async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200, "the service to be ready")
  return { url, service }
}

/** Requests the service is answering right now: the sum of `http_requests_in_progress` on /metrics. */
export const requestsInFlight = async (url: string): Promise<number> =>
  (await scrapeMetrics(url)).sum("http_requests_in_progress", (labels) => labels["endpoint"] !== "/metrics")

/** Resolves once at least `count` requests are in flight at the service (or `settled` resolved first: they were all answered). */
export const untilInFlight = async (url: string, count: number, settled: Promise<unknown>) => {
  let done = false
  void settled.then(() => (done = true))
  await eventually(async () => done || (await requestsInFlight(url)) >= count, `${count} requests in flight`)
}

/** Sends SIGTERM and resolves with the exit code and how long the process took to exit. */
export const terminate = async ({ service }: Running) => {
  const started = performance.now()
  service.child.kill("SIGTERM")
  const code = await service.exited
  return { code, ms: Math.round(performance.now() - started) }
}

/** The service's JSON log lines (LOG_FORMAT=json), parsed; other lines are skipped. */
export const logLines = (running: Running): Array<Record<string, unknown>> =>
  running.service.stdout().split("\n").flatMap((line) => {
    try {
      const parsed: unknown = JSON.parse(line)
      return typeof parsed === "object" && parsed !== null ? [parsed as Record<string, unknown>] : []
    } catch {
      return []
    }
  })

/** The message of a log line (a string, or the first of an array). */
export const messageOf = (line: Record<string, unknown>): string => {
  const message = line["message"]
  return Array.isArray(message) ? String(message[0]) : String(message)
}

export interface Answer {
  /** 0: not answered (the connection failed). */
  readonly status: number
  readonly requestId: string | null
  /** The body of an answer that is not 2xx. */
  readonly body: unknown
  /** When it was sent, ms since the load began. */
  readonly at: number
}

export interface Load {
  readonly answers: ReadonlyArray<Answer>
  /** Resolves once every worker has finished its request in flight. */
  readonly stop: () => Promise<ReadonlyArray<Answer>>
}

/**
 * `workers` loops, each sending `request()` then pausing `paceMs` (a load generator's pacing, not
 * a wait for an event), until stopped. Every answer is kept with its X-Request-ID.
 */
export const startLoad = (
  request: (n: number) => Promise<Response>,
  options: { readonly workers: number; readonly paceMs: number }
): Load => {
  const answers: Array<Answer> = []
  const began = performance.now()
  let stopped = false
  let n = 0
  const worker = async () => {
    while (!stopped) {
      const at = Math.round(performance.now() - began)
      try {
        const res = await request(n++)
        const ok = res.status >= 200 && res.status < 300
        const text = await res.text()
        let body: unknown = text
        try {
          body = JSON.parse(text)
        } catch {
          // kept as text
        }
        answers.push({ status: res.status, requestId: res.headers.get("x-request-id"), body: ok ? undefined : body, at })
      } catch (error) {
        answers.push({ status: 0, requestId: null, body: String((error as Error).cause ?? error), at })
      }
      await new Promise((resolve) => setTimeout(resolve, options.paceMs))
    }
  }
  const running = Array.from({ length: options.workers }, worker)
  return {
    answers,
    stop: async () => {
      stopped = true
      await Promise.all(running)
      return answers
    }
  }
}

/** Answers counted by status, e.g. `200: 41, 500: 12`. */
export const byStatus = (answers: ReadonlyArray<Answer>) => {
  const counts = new Map<number, number>()
  for (const a of answers) counts.set(a.status, (counts.get(a.status) ?? 0) + 1)
  return [...counts].sort(([a], [b]) => a - b).map(([status, count]) => `${status}: ${count}`).join(", ")
}
