/**
 * Load generators: autocannon (programmatic) for HTTP, with per-request paths and bodies, and a
 * `ws` client pool for WebSocket round trips, broadcast fan-out and idle connections.
 * Latencies are recorded per response (sub-millisecond, successful responses only, as
 * autocannon's own histogram) so rounds can be pooled for p50/p99.
 */
import autocannon from "autocannon"
import { randomUUID } from "node:crypto"
import { WebSocket } from "ws"

export interface RoundResult {
  /** Successful (2xx / status_code 0) responses per second. */
  readonly rps: number
  readonly ok: number
  /** Non-2xx responses, socket errors and timeouts (HTTP); failed, refused or unanswered messages (WS). */
  readonly errors: number
  readonly seconds: number
  readonly p50: number
  readonly p99: number
  /** Status codes other than 2xx seen, with counts (or error messages). */
  readonly problems: Record<string, number>
  readonly latencies: Float64Array
}

export const percentile = (sorted: Float64Array, p: number) =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!

/** A growable Float64Array. */
export class Samples {
  private data = new Float64Array(4096)
  private n = 0
  push(v: number) {
    if (this.n === this.data.length) {
      const next = new Float64Array(this.data.length * 2)
      next.set(this.data)
      this.data = next
    }
    this.data[this.n++] = v
  }
  get length() {
    return this.n
  }
  sorted(): Float64Array {
    return this.data.slice(0, this.n).sort()
  }
}

export interface HttpRequest {
  readonly method: "GET" | "POST" | "PUT" | "DELETE"
  readonly path: string
  readonly body?: string
}

/** An HTTP load: each request made by `next` (paths, methods and bodies may vary per request), tokens round-robin. */
export interface HttpSpec {
  readonly connections: number
  readonly next: () => HttpRequest
  readonly tokens: ReadonlyArray<string>
  /**
   * Unmeasured work before each run of `seconds` (warm-up or round), before the runner waits for
   * the server to be quiet: e.g. W10 creates the authors its deletes will remove. Resolves with
   * what to log, if anything.
   */
  readonly prepare?: (seconds: number) => Promise<string | undefined>
}

export const runHttp = (baseUrl: string, spec: HttpSpec, seconds: number): Promise<RoundResult> =>
  new Promise((resolve, reject) => {
    let next = 0
    const samples = new Samples()
    const problems: Record<string, number> = {}
    const started = performance.now()
    const instance = autocannon({
      url: baseUrl,
      connections: spec.connections,
      duration: seconds,
      timeout: 10,
      requests: [{
        setupRequest: (request) => {
          const r = spec.next()
          return {
            ...request,
            method: r.method,
            path: r.path,
            headers: {
              ...request.headers,
              authorization: `Bearer ${spec.tokens[next++ % spec.tokens.length]}`,
              ...(r.body !== undefined ? { "content-type": "application/json" } : {})
            },
            ...(r.body !== undefined ? { body: r.body } : {})
          }
        }
      }]
    }, (error: unknown, result: autocannon.Result) => {
      if (error !== null && error !== undefined) return reject(error instanceof Error ? error : new Error(String(error)))
      const elapsed = result.duration > 0 ? result.duration : (performance.now() - started) / 1000
      const sorted = samples.sorted()
      if (result.errors > 0) problems["socket errors/timeouts"] = result.errors
      resolve({
        rps: result["2xx"] / elapsed,
        ok: result["2xx"],
        errors: result.non2xx + result.errors,
        seconds: elapsed,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        problems,
        latencies: sorted
      })
    })
    instance.on("response", (_client, status, _bytes, responseTime) => {
      if (status >= 200 && status < 300) samples.push(responseTime)
      else problems[String(status)] = (problems[String(status)] ?? 0) + 1
    })
  })

// ---- WebSocket ----------------------------------------------------------------------------------

export const ZERO_ID = "00000000-0000-0000-0000-000000000000"

export const wsAddress = (wsBaseUrl: string, token: string) => `${wsBaseUrl}/web?Authorization=${encodeURIComponent(`Bearer ${token}`)}`

/** Opens one connection; rejects with the handshake failure (e.g. "Unexpected server response: 404"). */
export const openClient = (wsBaseUrl: string, token: string, timeoutMs = 15_000) =>
  new Promise<WebSocket>((resolve, reject) => {
    const ws = new WebSocket(wsAddress(wsBaseUrl, token), { perMessageDeflate: false, handshakeTimeout: timeoutMs })
    const fail = (error: Error) => {
      ws.removeAllListeners()
      ws.on("error", () => {})
      ws.terminate()
      reject(error)
    }
    ws.once("open", () => {
      ws.removeListener("error", fail)
      ws.on("error", () => {})
      resolve(ws)
    })
    ws.once("error", fail)
    ws.once("close", (code, reason) => fail(new Error(`closed ${code} ${reason.toString()}`)))
  })

/**
 * Opens `count` connections, `concurrency` handshakes at a time. The first failure stops it:
 * the clients opened so far are closed and the error is thrown.
 */
export const openClients = async (wsBaseUrl: string, tokens: ReadonlyArray<string>, count: number, concurrency = 100) => {
  const clients: Array<WebSocket> = []
  let index = 0
  let failure: Error | undefined
  const worker = async () => {
    while (failure === undefined && index < count) {
      const i = index++
      try {
        clients.push(await openClient(wsBaseUrl, tokens[i % tokens.length]!))
      } catch (error) {
        failure ??= error instanceof Error ? error : new Error(String(error))
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker))
  if (failure !== undefined) {
    await closeClients(clients)
    throw failure
  }
  return clients
}

export const closeClients = async (clients: ReadonlyArray<WebSocket>) => {
  await Promise.all(clients.map((ws) =>
    new Promise<void>((resolve) => {
      if (ws.readyState === WebSocket.CLOSED) return resolve()
      const timer = setTimeout(() => {
        ws.terminate()
        resolve()
      }, 2000)
      ws.once("close", () => {
        clearTimeout(timer)
        resolve()
      })
      ws.close(1000)
    })
  ))
}

/** JSON.parse that yields undefined instead of throwing. */
export const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}
const field = (u: unknown, key: string): unknown => (typeof u === "object" && u !== null ? (u as Record<string, unknown>)[key] : undefined)

/**
 * Request/response round trips over open connections, one message in flight per connection,
 * for `seconds`. Broadcasts (all-zero req_id) are ignored.
 */
export const runWsRoundTrips = (clients: ReadonlyArray<WebSocket>, makeRequest: () => { pkg_id: number; data: unknown }, seconds: number) =>
  new Promise<RoundResult>((resolve) => {
    const samples = new Samples()
    const problems: Record<string, number> = {}
    let ok = 0
    let errors = 0
    let running = true
    let inFlight = 0
    const started = performance.now()
    const problem = (key: string) => {
      errors++
      problems[key] = (problems[key] ?? 0) + 1
    }
    const cleanups: Array<() => void> = []
    const finish = () => {
      for (const c of cleanups) c()
      if (inFlight > 0) problems["unanswered at end"] = inFlight
      errors += inFlight
      const sorted = samples.sorted()
      const elapsed = (performance.now() - started) / 1000
      resolve({ rps: ok / Math.min(elapsed, seconds), ok, errors, seconds: elapsed, p50: percentile(sorted, 50), p99: percentile(sorted, 99), problems, latencies: sorted })
    }
    for (const ws of clients) {
      let pending: { id: string; t0: number } | undefined
      const send = () => {
        if (!running || ws.readyState !== WebSocket.OPEN) return
        const request = makeRequest()
        pending = { id: randomUUID(), t0: performance.now() }
        inFlight++
        ws.send(JSON.stringify({ pkg_id: request.pkg_id, req_id: pending.id, data: request.data }))
      }
      const onMessage = (raw: Buffer) => {
        const message = parseJson(raw.toString())
        const reqId = field(message, "req_id")
        if (pending === undefined || reqId !== pending.id) return
        inFlight--
        const status = field(message, "status_code")
        if (status === 0) {
          ok++
          samples.push(performance.now() - pending.t0)
        } else {
          problem(`status_code ${String(status)}`)
        }
        pending = undefined
        send()
      }
      const onClose = (code: number) => {
        if (!running) return
        if (pending !== undefined) inFlight--
        pending = undefined
        problem(`closed ${code}`)
      }
      ws.on("message", onMessage)
      ws.on("close", onClose)
      cleanups.push(() => {
        ws.off("message", onMessage)
        ws.off("close", onClose)
      })
      send()
    }
    setTimeout(() => {
      running = false
      // Let the messages in flight come back (up to 2 s), so they are not counted as errors.
      const waitStart = performance.now()
      const check = () => (inFlight === 0 || performance.now() - waitStart > 2000 ? finish() : setTimeout(check, 10))
      check()
    }, seconds * 1000)
  })
