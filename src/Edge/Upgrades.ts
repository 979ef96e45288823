/**
 * The seam between the HTTP server and the WebSocket transport: the server (Http/NodeServer.ts)
 * owns the socket and hands every upgrade request to the handler registered here (Ws/Server.ts);
 * neither transport imports the other.
 */
import { Context, type Effect, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { type IncomingMessage, STATUS_CODES } from "node:http"
import type { Duplex } from "node:stream"
import { type ClientError, errorHeaders, errorStatus } from "../Errors.ts"

export interface UpgradeHandler {
  readonly upgrade: (request: IncomingMessage, socket: Duplex, head: Buffer) => void
  /** Closes every connection; called when shutdown begins. */
  readonly shutdown: () => Promise<void>
}

export class Upgrades extends Context.Service<Upgrades, {
  /** Takes over WebSocket upgrades until the scope closes; before and after, upgrades get 503. */
  readonly handle: (handler: UpgradeHandler) => Effect.Effect<void, never, Scope.Scope>
}>()("Edge/Upgrades") {}

/**
 * Answers on the raw socket with a JSON `{detail}` error (docs/errors-and-limits.md#http-errors) and closes it: a refused
 * upgrade, a request the parser refused. `correlationId` defaults to a generated one; `headers`
 * adds more (a 429's Retry-After and X-RateLimit-*); `head` leaves the body out (the answer to a
 * HEAD request has none: a client would read it as the start of the next response).
 */
export const refuseOnSocket = (
  socket: Duplex,
  status: number,
  detail: string,
  options: {
    readonly correlationId?: string
    readonly headers?: Readonly<Record<string, string>>
    readonly head?: boolean
  } = {}
) => {
  const body = JSON.stringify({ detail })
  const extra = Object.entries(options.headers ?? {}).map(([name, value]) => `${name}: ${value}\r\n`).join("")
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Bad Request"}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\n` +
      `X-Correlation-ID: ${options.correlationId ?? randomBytes(4).toString("hex")}\r\n${extra}Connection: close\r\n\r\n${options.head === true ? "" : body}`
  )
}

/** `retry-after` → `Retry-After`: how the raw answers have always spelt their header names. */
const headerCase = (name: string) => name.replace(/(^|-)([a-z])/g, (_m, dash: string, c: string) => dash + c.toUpperCase())

/**
 * `refuseOnSocket` with an error of the table (Errors.ts): its status, `{detail}` and headers
 * (`Allow`, `Retry-After`), plus any `headers` given (a 429's X-RateLimit-*).
 */
export const refuseWithError = (
  socket: Duplex,
  error: ClientError,
  options: Parameters<typeof refuseOnSocket>[3] = {}
) =>
  refuseOnSocket(socket, errorStatus[error._tag].http, error.detail, {
    ...options,
    headers: {
      ...Object.fromEntries(Object.entries(errorHeaders(error)).map(([name, value]) => [headerCase(name), value])),
      ...options.headers
    }
  })
