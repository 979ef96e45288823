/**
 * A private `redis-server` for fault tests: a child process on a free loopback port, without
 * persistence (`--save "" --appendonly no`), so a restart forgets every key and every `CONFIG SET`
 * (a restarted cache as operators meet it). `kill` and `restart` keep the port, so clients
 * reconnect to the same address.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { freePort } from "./Ports.ts"

export interface RedisServer {
  readonly port: number
  readonly url: string
  /** Stops the server (SIGKILL by default: a crash) and resolves once the process has exited. */
  readonly kill: (signal?: NodeJS.Signals) => Promise<void>
  /** Starts it again on the same port (after `kill`), with extra arguments if given; resolves when it accepts connections. */
  readonly start: (extraArgs?: ReadonlyArray<string>) => Promise<void>
  /** `kill` then `start`. */
  readonly restart: (extraArgs?: ReadonlyArray<string>) => Promise<void>
  readonly running: () => boolean
}

const READY = "Ready to accept connections"

const launch = (port: number, extraArgs: ReadonlyArray<string>) =>
  new Promise<ChildProcess>((resolve, reject) => {
    const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", ...extraArgs], {
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    const onData = (chunk: Buffer) => {
      output += chunk.toString()
      if (output.includes(READY)) {
        child.stdout?.off("data", onData)
        child.stdout?.resume() // keep draining: a full pipe would stall the server's logging
        child.off("exit", onExit)
        resolve(child)
      }
    }
    const onExit = (code: number | null) => reject(new Error(`redis-server exited (${code}) before it was ready:\n${output}`))
    child.stdout?.on("data", onData)
    child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.once("exit", onExit)
    child.once("error", reject)
  })

export const startRedisServer = async (extraArgs: ReadonlyArray<string> = []): Promise<RedisServer> => {
  const port = await freePort()
  let child: ChildProcess | undefined = await launch(port, extraArgs)

  const kill = async (signal: NodeJS.Signals = "SIGKILL") => {
    const current = child
    child = undefined
    if (current === undefined || current.exitCode !== null || current.signalCode !== null) return
    const exited = new Promise<void>((resolve) => current.once("exit", () => resolve()))
    current.kill(signal)
    await exited
  }
  const start = async (args: ReadonlyArray<string> = extraArgs) => {
    if (child !== undefined) throw new Error("redis-server is already running")
    child = await launch(port, args)
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    kill,
    start,
    restart: async (args) => {
      await kill()
      await start(args)
    },
    running: () => child !== undefined
  }
}
