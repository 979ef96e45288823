/**
 * A loopback TCP proxy a test can cut, blackhole and restore, to simulate an outage of PostgreSQL or
 * Redis without stopping the shared server other tests use.
 */
import { createServer, type Server, type Socket, connect } from "node:net"

export interface TcpProxy {
  readonly port: number
  /** Refuses new connections and drops open ones. */
  readonly cut: () => Promise<void>
  /** Accepts connections (open and new) but forwards nothing either way: a half-open peer. */
  readonly blackhole: () => void
  /** Accepts connections again on the same port and forwards again. */
  readonly restore: () => Promise<void>
  readonly close: () => Promise<void>
  /** Connections accepted so far (forwarded or blackholed): the client has reached the proxy. */
  readonly accepted: () => number
}

export const startTcpProxy = async (targetHost: string, targetPort: number): Promise<TcpProxy> => {
  const sockets = new Set<Socket>()
  const pairs = new Set<readonly [Socket, Socket]>()
  let blackholed = false
  let accepted = 0
  const swallow = (socket: Socket) => {
    socket.unpipe()
    socket.removeAllListeners("data")
    socket.on("data", () => {})
    socket.resume()
  }
  const handle = (client: Socket) => {
    accepted++
    if (blackholed) {
      sockets.add(client)
      client.on("error", () => client.destroy())
      swallow(client)
      return
    }
    const upstream = connect(targetPort, targetHost)
    const pair = [client, upstream] as const
    pairs.add(pair)
    sockets.add(client)
    sockets.add(upstream)
    const drop = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
      pairs.delete(pair)
    }
    client.on("error", drop).on("close", drop)
    upstream.on("error", drop).on("close", drop)
    client.pipe(upstream).pipe(client)
  }
  const listen = (server: Server, port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once("error", reject)
      server.listen(port, "127.0.0.1", () => {
        const address = server.address()
        resolve(typeof address === "object" && address !== null ? address.port : port)
      })
    })
  const stop = (server: Server) =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy()
      sockets.clear()
      server.close(() => resolve())
    })
  let server = createServer(handle)
  const port = await listen(server, 0)
  return {
    port,
    cut: () => stop(server),
    blackhole: () => {
      blackholed = true
      for (const [client, upstream] of pairs) {
        swallow(client)
        swallow(upstream)
      }
    },
    restore: async () => {
      blackholed = false
      await stop(server)
      server = createServer(handle)
      await listen(server, port)
    },
    close: () => stop(server),
    accepted: () => accepted
  }
}

/** Host and port of a `postgres://` or `redis://` URL. */
export const hostPort = (url: string) => {
  const parsed = new URL(url)
  return { host: parsed.hostname, port: Number(parsed.port) }
}

/** The same URL pointed at the proxy. */
export const viaProxy = (url: string, proxy: Pick<TcpProxy, "port">) => {
  const parsed = new URL(url)
  parsed.hostname = "127.0.0.1"
  parsed.port = String(proxy.port)
  return parsed.toString()
}
