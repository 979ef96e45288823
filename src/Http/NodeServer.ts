/**
 * The Node HTTP server under the app, with the edges @effect/platform leaves open:
 * - Before the app's handler is attached and after it is detached at shutdown, a request would
 *   get no answer at all; it gets 503 instead — with the health report's
 *   shape on the health endpoints, `/livez` 200. The port opens first (App.ts), so this is what a
 *   probe sees for as long as the service starts (the database may take a while to come up):
 *   `{"detail":"Service starting"}`, and `Service unavailable` once the app has been detached.
 * - `ADMIN_PORT`: a second listener (`NodeServer.layer`'s `adminPort`) whose requests go to this
 *   same server's listeners — one app, one router, one place that wires the Layers. Its requests
 *   are marked (`onAdminPort`), and the front door serves the admin paths only to them
 *   (Http/FrontDoor.ts).
 * - WebSocket upgrades go to the service's own `/web` server (Ws/Server.ts), which needs the raw
 *   `ws` options the platform does not expose (frame size limit → 1009, no compression, one
 *   bounded send buffer per connection); the platform's upgrade handler never sees them.
 * - HTTP/1.1 framing and pipelining (Http1.ts): one answer per request, in order, a parser refusal
 *   included; requests behind a write wait for it; ambiguous framing and headers are refused.
 * - Graceful shutdown (docs/operations.md#shutdown): stop accepting, close the WebSockets, let the
 *   requests in flight finish while every service is still up, then let the layers close.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Effect, Layer, type Scope } from "effect"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { Duplex } from "node:stream"
import { refuseWithError, type UpgradeHandler, Upgrades } from "../Edge/Upgrades.ts"
import { errorStatus, RouteNotFound, ServiceStarting, ServiceUnavailable } from "../Errors.ts"
import { serveHttp1 } from "./Http1.ts"
import { STARTING_REPORT } from "../Observability/Api.ts"

export interface ServerOptions {
  readonly port: number
  readonly host: string
  readonly adminPort?: number | undefined
}

export interface NodeServerShape {
  readonly server: Server
  /** Requests being answered right now. */
  readonly inFlight: () => number
  /** Stops accepting and resolves when no request is in flight (or after `timeoutMs`). */
  readonly drain: (timeoutMs: number) => Effect.Effect<void>
  /** Takes over WebSocket upgrades until the scope closes. */
  readonly handleUpgrades: (handler: UpgradeHandler) => Effect.Effect<void, never, Scope.Scope>
  /**
   * Takes the requests of the `ADMIN_PORT` listener: marked (`onAdminPort`), answered by this
   * server's listeners (counted, drained, the starting answer), and it stops accepting with this one.
   */
  readonly adoptAdmin: (listener: Server) => void
}

export class NodeServer extends Context.Service<NodeServer, NodeServerShape>()("Http/NodeServer") {
  /** On `port` (and the admin port, when given): see `layer` below. */
  static readonly layer = (options: ServerOptions) => layer(options)
}

const LIVE = JSON.stringify({ status: "ok" })
const STARTING = JSON.stringify(STARTING_REPORT)

/** Before the app's handler is first attached, and after it has been detached. */
type Phase = "starting" | "stopped"

const errorOf = (phase: Phase) => (phase === "starting" ? ServiceStarting.instance : ServiceUnavailable.instance)

/** Without the app: alive (`/livez` 200), not ready — `/health` and `/readyz` 503 in the health report's shape, anything else 503 `{detail}`. */
const startingAnswer = (url: string | undefined, phase: Phase): readonly [number, string] => {
  const path = url === undefined ? "" : url.split("?", 1)[0]
  return path === "/livez"
    ? [200, LIVE]
    : path === "/health" || path === "/readyz"
    ? [503, STARTING]
    : [errorStatus[errorOf(phase)._tag].http, JSON.stringify({ detail: errorOf(phase).detail })]
}

/** Requests that came in on the `ADMIN_PORT` listener (the Node request objects; nothing a client can forge). */
const adminRequests = new WeakSet<object>()

/** Whether a request (its platform `source`, the Node request) arrived on the `ADMIN_PORT` listener. */
export const onAdminPort = (source: object): boolean => adminRequests.has(source)

export const makeNodeServer = (): NodeServerShape => {
  // A missing Host is refused by Http1.ts, in order and with a JSON body (Node's own 400 has none).
  const server = createServer({ keepAliveTimeout: 65_000, requireHostHeader: false })
  let inFlight = 0
  let upgrades: UpgradeHandler | undefined
  // Whether the app's handler has ever been attached: without it now, the service is either
  // still starting or already stopped.
  let attached = false
  const phase = (): Phase => (attached ? "stopped" : "starting")
  const idle = new Set<() => void>()
  // Registered first, so they see every request (`checkContinue` replaces `request` for
  // `Expect: 100-continue` once the platform listens to it); they answer only when alone.
  const track = (event: "request" | "checkContinue") => (req: IncomingMessage, res: ServerResponse) => {
    inFlight++
    res.once("close", () => {
      inFlight--
      if (inFlight === 0) for (const wake of idle) wake()
    })
    if (server.listenerCount(event) > 1) return
    const [status, body] = startingAnswer(req.url, phase())
    res.writeHead(status, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      ...(status === 503 ? { "retry-after": "1", connection: "close" } : {})
    })
    res.end(body)
  }
  server.on("request", track("request"))
  server.on("checkContinue", track("checkContinue"))
  server.on("newListener", (event: string | symbol) => {
    if (event === "request") attached = true
  })
  // Upgrades are dispatched here instead of to the listeners (the platform registers one). Node
  // emits `upgrade` only when something listens: this listener (never called) makes it do so
  // from the start, so an upgrade while starting is refused here too, not taken for a request.
  server.on("upgrade", () => {})
  const emit = server.emit
  server.emit = function(this: Server, event: string | symbol, ...args: Array<unknown>) {
    if (event !== "upgrade") return Reflect.apply(emit, this, [event, ...args]) as boolean
    const [request, socket, head] = args as [IncomingMessage, Duplex, Buffer]
    socket.on("error", () => {})
    if (upgrades === undefined) refuseWithError(socket, errorOf(phase()))
    else upgrades.upgrade(request, socket, head)
    return true
  } as Server["emit"]
  // Outermost: one answer per request in order, held requests, parser refusals (Http1.ts).
  const http1 = serveHttp1(server)

  const admins = new Set<Server>()
  const adoptAdmin = (listener: Server) => {
    admins.add(listener)
    listener.on("request", (req: IncomingMessage, res: ServerResponse) => {
      adminRequests.add(req)
      server.emit("request", req, res)
    })
    // Its requests go through the main server's `emit`, so Http1.ts orders them per connection too.
    listener.on("clientError", http1.clientError)
    // No WebSocket on the admin port.
    listener.on("upgrade", (_req: IncomingMessage, socket: Duplex) => {
      socket.on("error", () => {})
      refuseWithError(socket, RouteNotFound.instance)
    })
  }

  const drain = (timeoutMs: number) =>
    Effect.callback<void>((resume) => {
      server.close()
      server.closeIdleConnections()
      for (const admin of admins) {
        admin.close()
        admin.closeIdleConnections()
      }
      const closingSockets = upgrades?.shutdown() ?? Promise.resolve()
      let requestsDone = false
      let finished = false
      const done = () => {
        if (finished) return
        finished = true
        clearTimeout(timer)
        idle.delete(wake)
        // Keep-alive connections whose last response just finished.
        server.closeIdleConnections()
        for (const admin of admins) admin.closeIdleConnections()
        resume(Effect.void)
      }
      const wake = () => {
        if (requestsDone) return
        requestsDone = true
        void closingSockets.then(done)
      }
      const timer = setTimeout(done, timeoutMs)
      idle.add(wake)
      if (inFlight === 0) wake()
    })

  const handleUpgrades = (handler: UpgradeHandler) =>
    Effect.acquireRelease(
      Effect.sync(() => {
        upgrades = handler
        attached = true
      }),
      () =>
        Effect.sync(() => {
          if (upgrades === handler) upgrades = undefined
        })
    )

  return { server, inFlight: () => inFlight, drain, handleUpgrades, adoptAdmin }
}

/**
 * The `ADMIN_PORT` listener on `host`, adopted by `node` (its requests go to the same app), open
 * until the scope closes. A port that cannot be bound stops startup, naming ADMIN_PORT.
 */
const adminListener = (node: NodeServerShape, options: { readonly port: number; readonly host: string }) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const admin = createServer({ keepAliveTimeout: 65_000, requireHostHeader: false })
    yield* Effect.acquireRelease(
      Effect.callback<void, Error>((resume) => {
        const failed = (error: Error) => resume(Effect.fail(new Error(`ADMIN_PORT ${options.port} cannot be opened: ${error.message}`)))
        admin.once("error", failed)
        admin.listen(options.port, options.host, () => {
          admin.off("error", failed)
          resume(Effect.void)
        })
      }),
      () =>
        Effect.callback<void>((resume) => {
          admin.close(() => resume(Effect.void))
          admin.closeAllConnections()
        })
    )
    node.adoptAdmin(admin)
    const address = admin.address()
    const port = typeof address === "object" && address !== null ? address.port : options.port
    yield* Effect.logInfo(`Admin port: /metrics and /api/profiling/* on http://${options.host.includes(":") ? `[${options.host}]` : options.host}:${port} only`)
  }))

/**
 * Provided over the whole app so that its finalizer runs first at shutdown: the app's handler
 * and services are still in place while the WebSockets close and the requests in flight complete.
 */
export const drainOnShutdown = (timeoutMs: number) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const node = yield* NodeServer
    yield* Effect.addFinalizer(() =>
      Effect.logInfo("Shutting down: closing WebSockets, draining requests in flight").pipe(
        Effect.andThen(node.drain(timeoutMs))
      )
    )
  }))

/**
 * The Node server (as `NodeServer` and `Upgrades`) and the platform's `HttpServer` on it; with
 * `adminPort`, the admin listener too.
 */
const layer = (options: ServerOptions) =>
  Layer.unwrap(Effect.sync(() => {
    const node = makeNodeServer()
    return Layer.mergeAll(
      Layer.succeed(NodeServer, node),
      Layer.succeed(Upgrades, { handle: node.handleUpgrades }),
      NodeHttpServer.layer(() => node.server, { port: options.port, host: options.host }),
      options.adminPort === undefined ? Layer.empty : adminListener(node, { port: options.adminPort, host: options.host })
    )
  }))
