/**
 * What the fault tests share around the service as a child process (Launcher.ts's `startService`):
 * the requests in flight, and a paced load of authenticated requests that records every answer.
 */
import { scrapeMetrics } from "./Metrics.ts"
import { eventually } from "./Eventually.ts"

/** The fault tests' variables over the launcher's defaults: no rate limit, only errors logged. */
export const QUIET = { RATE_LIMIT_ENABLED: "false", LOG_LEVEL: "error" } as const

/** Requests the service is answering right now: the sum of `http_requests_in_progress` on /metrics. */
export const requestsInFlight = async (url: string): Promise<number> =>
  (await scrapeMetrics(url)).sum("http_requests_in_progress", (labels) => labels["endpoint"] !== "/metrics")

/** Resolves once at least `count` requests are in flight at the service (or `settled` resolved first: they were all answered). */
export const untilInFlight = async (url: string, count: number, settled: Promise<unknown>) => {
  let done = false
  void settled.then(() => (done = true))
  await eventually(async () => done || (await requestsInFlight(url)) >= count, `${count} requests in flight`)
}

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
