/**
 * The seam between the HTTP server and the WebSocket transport: the server (Http/NodeServer.ts)
 * owns the socket and hands every upgrade request to the handler registered here (Ws/Server.ts);
 * neither transport imports the other.
 */
import { Context, type Effect, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { type IncomingMessage, STATUS_CODES } from "node:http"
import type { Duplex } from "node:stream"

export interface UpgradeHandler {
  readonly upgrade: (request: IncomingMessage, socket: Duplex, head: Buffer) => void
  /** Closes every connection; called when shutdown begins. */
  readonly shutdown: () => Promise<void>
}

export class Upgrades extends Context.Service<Upgrades, {
  /** Takes over WebSocket upgrades until the scope closes; before and after, upgrades get 503. */
  readonly handle: (handler: UpgradeHandler) => Effect.Effect<void, never, Scope.Scope>
}>()("Edge/Upgrades") {}

/** Answers on the raw socket with a JSON `{detail}` error and closes it (a refused upgrade, a request the parser refused). */
export const refuseOnSocket = (socket: Duplex, status: number, detail: string) => {
  const body = JSON.stringify({ detail })
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Bad Request"}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\n` +
      `X-Correlation-ID: ${randomBytes(4).toString("hex")}\r\nConnection: close\r\n\r\n${body}`
  )
}
