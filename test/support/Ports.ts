/** Free ports for the servers tests start (the service, PostgreSQL, Redis). */
import { createServer } from "node:net"

/** A port that was free a moment ago. */
export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
