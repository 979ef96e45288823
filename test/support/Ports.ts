/**
 * Free ports for the servers tests start (the service, PostgreSQL, Redis, Redis Cluster nodes).
 *
 * A port is picked at random below the kernel's ephemeral range (`ip_local_port_range`, 32768–60999
 * on Linux) and checked free by binding it. A port the kernel hands out (`listen(0)`, or the local
 * end of any outgoing connection) comes from that range, so it could be taken by another test's
 * client socket between the pick and the server's bind, or while a test restarts a server on the
 * same port; below the range it cannot. A Redis Cluster node also binds its bus port (+10000), so
 * cluster ports come from a range of their own whose bus ports meet no other pick:
 * - `freePort`: 22000–32767;
 * - `freeClusterPort`: 2000–11999, bus port 12000–21999.
 */
import { createServer } from "node:net"

/** Whether `port` can be bound on loopback now. */
const bindable = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

const pick = async (from: number, to: number, free: (port: number) => Promise<boolean>) => {
  for (;;) {
    const port = from + Math.floor(Math.random() * (to - from + 1))
    if (await free(port)) return port
  }
}

/** A port that was free a moment ago. */
export const freePort = () => pick(22000, 32767, bindable)

/** A port that was free a moment ago, as was its cluster bus port (+10000). */
export const freeClusterPort = () => pick(2000, 11999, async (port) => (await bindable(port)) && (await bindable(port + 10000)))
