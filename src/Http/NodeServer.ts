/**
 * The Node HTTP server under the app, with the two edges @effect/platform leaves open:
 * - Before the app's handler is attached (the port opens before migrations finish) and after it
 *   is detached at shutdown, a request would get no answer at all; it gets 503 instead.
 * - Graceful shutdown (CONTRACT §5, §9 Signals): stop accepting, let the requests in flight
 *   finish while every service is still up, then let the layers close their pools.
 */
import { Effect, Layer } from "effect"
import { createServer, type Server } from "node:http"

export interface NodeServer {
  readonly server: Server
  /** Requests being answered right now. */
  readonly inFlight: () => number
  /** Stops accepting and resolves when no request is in flight (or after `timeoutMs`). */
  readonly drain: (timeoutMs: number) => Effect.Effect<void>
}

export const makeNodeServer = (): NodeServer => {
  const server = createServer({ keepAliveTimeout: 65_000 })
  let inFlight = 0
  const idle = new Set<() => void>()
  // Registered first, so it sees every request; it answers only when it is the sole listener.
  server.on("request", (_req, res) => {
    inFlight++
    res.once("close", () => {
      inFlight--
      if (inFlight === 0) for (const wake of idle) wake()
    })
    if (server.listenerCount("request") > 1) return
    res.writeHead(503, { "content-type": "application/json", "retry-after": "1", connection: "close" })
    res.end(JSON.stringify({ detail: "Service unavailable" }))
  })

  const drain = (timeoutMs: number) =>
    Effect.async<void>((resume) => {
      server.close()
      server.closeIdleConnections()
      const done = () => {
        clearTimeout(timer)
        idle.delete(done)
        // Keep-alive connections whose last response just finished.
        server.closeIdleConnections()
        resume(Effect.void)
      }
      const timer = setTimeout(done, timeoutMs)
      idle.add(done)
      if (inFlight === 0) done()
    })

  return { server, inFlight: () => inFlight, drain }
}

/**
 * Provided over the whole app so that its finalizer runs first at shutdown: the app's handler
 * and services are still in place while the requests in flight complete.
 */
export const drainOnShutdown = (node: NodeServer, timeoutMs: number) =>
  Layer.scopedDiscard(Effect.addFinalizer(() =>
    Effect.logInfo("Shutting down: draining requests in flight").pipe(Effect.zipRight(node.drain(timeoutMs)))
  ))
