/** Runs the real service as `npm start` does (`node dist/main.js`, built by the global setup) as a child process, for startup, signal and fault tests. */
import { spawn, type ChildProcess } from "node:child_process"
import { createServer } from "node:net"

export interface Spawned {
  readonly child: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  /** Resolves with the exit code (or the signal name) when the process ends. */
  readonly exited: Promise<number | string>
}

/** `env` over the defaults below; a variable given as `undefined` is left unset (e.g. to get the service's own default). */
export const spawnService = (env: Record<string, string | undefined>): Spawned => {
  const child = spawn(process.execPath, ["dist/main.js"], {
    env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", LOG_FORMAT: "json", PROFILING_ENABLED: "false", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let out = ""
  let err = ""
  child.stdout?.on("data", (d: Buffer) => (out += d.toString()))
  child.stderr?.on("data", (d: Buffer) => (err += d.toString()))
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)))
  return { child, stdout: () => out, stderr: () => err, exited }
}

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
