/**
 * The two servers under test as child processes: the service (`node dist/main.js`, built
 * first, as `npm start` runs it) and the baseline (`node bench/baseline/server.ts`), plus
 * what the runner reads from them (RSS and CPU time from /proc).
 */
import { type ChildProcess, spawn } from "node:child_process"
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"
import { buildIfNeeded, stripTree } from "../../scripts/build.ts"

export const ROOT = new URL("../../", import.meta.url).pathname
/** Where the baseline's stripped JavaScript goes: two levels down, like bench/baseline/, so its relative paths hold. */
const BASELINE_JS = "bench/.baseline-js"

export type ServerName = "service" | "baseline"

export interface Server {
  readonly name: ServerName
  readonly url: string
  readonly wsUrl: string
  readonly pid: number
  readonly alive: () => boolean
  /** Why it is gone (exit code or signal, and the tail of its output), if it is. */
  readonly exitReason: () => string | undefined
  readonly output: () => string
  readonly stop: () => Promise<void>
}

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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The last `max` characters of a stream (a chatty server must not grow the runner's memory). */
const tail = (max = 16_384) => {
  let text = ""
  return {
    push: (chunk: Buffer) => {
      text += chunk.toString()
      if (text.length > max * 2) text = text.slice(-max)
    },
    get: () => text.slice(-max)
  }
}

/** Starts a server; one more attempt if the first dies before it is ready (logged by the caller's output). */
const launch = async (name: ServerName, script: ReadonlyArray<string>, env: Record<string, string>, port: number, startTimeoutMs: number): Promise<Server> => {
  try {
    return await launchOnce(name, script, env, port, startTimeoutMs)
  } catch (error) {
    process.stdout.write(`${name} failed to start (${error instanceof Error ? error.message.slice(0, 300) : String(error)}); trying once more\n`)
    return launchOnce(name, script, env, await freePort(), startTimeoutMs)
  }
}

/** `BENCH_HEAP_SNAPSHOT_DIR`: both servers write a heap snapshot there at the end of the run (`heapSnapshot`). */
export const HEAP_SNAPSHOT_DIR = process.env["BENCH_HEAP_SNAPSHOT_DIR"] || undefined

/**
 * Extra Node options for one server's process, e.g. `BENCH_SERVICE_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof"`
 * (a CPU profile of the run, written when the server stops) or `--heapsnapshot-signal=SIGUSR2`.
 */
const nodeArgsOf = (name: ServerName) => [
  ...(process.env[`BENCH_${name.toUpperCase()}_NODE_ARGS`] ?? "").split(" ").filter((arg) => arg !== ""),
  ...(HEAP_SNAPSHOT_DIR === undefined ? [] : ["--heapsnapshot-signal=SIGUSR2"])
]

/**
 * Asks a server for a heap snapshot (SIGUSR2: Node writes it into the server's working directory,
 * the repository) and resolves with its path in BENCH_HEAP_SNAPSHOT_DIR once it is written.
 */
export const heapSnapshot = async (server: Server): Promise<string | undefined> => {
  if (HEAP_SNAPSHOT_DIR === undefined) return undefined
  mkdirSync(HEAP_SNAPSHOT_DIR, { recursive: true })
  const mine = () => readdirSync(ROOT).filter((f) => f.endsWith(".heapsnapshot") && f.includes(`.${server.pid}.`))
  const before = new Set(mine())
  process.kill(server.pid, "SIGUSR2")
  const deadline = Date.now() + 120_000
  let last = -1
  while (Date.now() < deadline) {
    await sleep(1000)
    const file = mine().find((f) => !before.has(f))
    if (file === undefined) continue
    const size = statSync(join(ROOT, file)).size
    if (size > 0 && size === last) {
      copyFileSync(join(ROOT, file), join(HEAP_SNAPSHOT_DIR, file))
      rmSync(join(ROOT, file))
      return join(HEAP_SNAPSHOT_DIR, file)
    }
    last = size
  }
  return undefined
}

const launchOnce = async (name: ServerName, script: ReadonlyArray<string>, env: Record<string, string>, port: number, startTimeoutMs: number): Promise<Server> => {
  const child: ChildProcess = spawn(process.execPath, [...nodeArgsOf(name), ...script], {
    cwd: ROOT,
    env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", ...env, PORT: String(port), HOST: "127.0.0.1" },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const out = tail()
  child.stdout?.on("data", out.push)
  child.stderr?.on("data", out.push)
  let exit: string | undefined
  let stopping = false
  const exited = new Promise<void>((resolve) => child.on("exit", (code, signal) => {
    exit = `exited (${code ?? signal ?? "?"})`
    // Code 0 or SIGTERM without our stop() means something outside the runner signalled it.
    if (!stopping) process.stdout.write(`${new Date().toISOString()} ${name} (pid ${child.pid}) ${exit} without being asked to stop\n`)
    resolve()
  }))
  const url = `http://127.0.0.1:${port}`
  const server: Server = {
    name,
    url,
    wsUrl: `ws://127.0.0.1:${port}`,
    pid: child.pid ?? -1,
    alive: () => exit === undefined,
    exitReason: () => {
      if (exit === undefined) return undefined
      const last = out.get().trim().split("\n").slice(-5).join(" | ").slice(-600)
      return `${name} ${exit}${last === "" ? "" : `: ${last}`}`
    },
    output: out.get,
    stop: async () => {
      if (exit !== undefined) return
      stopping = true
      child.kill("SIGTERM")
      const killed = await Promise.race([exited.then(() => false), sleep(15_000).then(() => true)])
      if (killed) {
        child.kill("SIGKILL")
        await exited
      }
    }
  }
  const deadline = Date.now() + startTimeoutMs
  while (Date.now() < deadline) {
    if (exit !== undefined) throw new Error(server.exitReason())
    const ok = await fetch(`${url}/health`).then((r) => r.status === 200, () => false)
    if (ok) return server
    await sleep(100)
  }
  await server.stop()
  throw new Error(`${name} did not answer GET /health with 200 within ${startTimeoutMs / 1000} s: ${out.get().slice(-600)}`)
}

export interface Backends {
  /** A database URL; undefined = embedded PGlite in the server's data directory. */
  readonly databaseUrl: string | undefined
  readonly redisUrl: string | undefined
  /** A Redis Cluster's seeds (`host:port,…`): the service's Redis instead of `redisUrl` (BENCH_REDIS_CLUSTER_NODES). */
  readonly redisClusterNodes?: string | undefined
  readonly redisPrefix: string
}

/** The V8 options `npm start` (and the image) run the service with: package.json's start script. */
const serviceV8Options = (): ReadonlyArray<string> => {
  const start = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts["start"] ?? ""
  return start.split(" ").filter((arg) => arg.startsWith("--max-"))
}

/**
 * The service with the issue's benchmark settings (limiters on but never refusing), run as `npm start` runs it;
 * `env` adds settings (bench/audit-retention.ts: AUDIT_RETENTION_DAYS).
 */
export const startService = async (dataDir: string, backends: Backends, startTimeoutMs = 180_000, env: Record<string, string> = {}) => {
  buildIfNeeded()
  return launch("service", [...serviceV8Options(), "dist/main.js"], {
    DATA_DIR: dataDir,
    APP_ENV: "development",
    LOG_LEVEL: "warning",
    LOG_FORMAT: "json",
    PROFILING_ENABLED: "false",
    PROFILING_OUTPUT_DIR: join(dataDir, "profiling"),
    RATE_LIMIT_ENABLED: "true",
    RATE_LIMIT_PER_MINUTE: "1000000000",
    WS_MESSAGE_RATE_LIMIT: "1000000000",
    WS_MAX_CONNECTIONS_PER_USER: "100000",
    DATABASE_POOL_MAX: "10",
    ...(backends.databaseUrl !== undefined ? { DATABASE_URL: backends.databaseUrl } : {}),
    ...(backends.redisClusterNodes !== undefined
      ? { REDIS_CLUSTER_NODES: backends.redisClusterNodes, REDIS_KEY_PREFIX: `${backends.redisPrefix}svc:` }
      : backends.redisUrl !== undefined
      ? { REDIS_URL: backends.redisUrl, REDIS_KEY_PREFIX: `${backends.redisPrefix}svc:` }
      : {}),
    ...env
  }, await freePort(), startTimeoutMs)
}

/** The baseline with the same settings; it verifies the service's tokens with the public key. */
export const startBaseline = async (dataDir: string, backends: Backends, publicJwkFile: string, startTimeoutMs = 180_000) => {
  // Plain JavaScript too, stripped the same way, so neither process pays for Node's TypeScript stripper.
  rmSync(join(ROOT, BASELINE_JS), { recursive: true, force: true })
  stripTree(join(ROOT, "bench/baseline"), join(ROOT, BASELINE_JS))
  return launch("baseline", [`${BASELINE_JS}/server.js`], {
    BASELINE_DATA_DIR: dataDir,
    JWT_PUBLIC_JWK_FILE: publicJwkFile,
    RATE_LIMIT_PER_MINUTE: "1000000000",
    WS_MESSAGE_RATE_LIMIT: "1000000000",
    WS_MAX_CONNECTIONS_PER_USER: "100000",
    DATABASE_POOL_MAX: "10",
    ...(backends.databaseUrl !== undefined ? { DATABASE_URL: backends.databaseUrl } : {}),
    ...(backends.redisUrl !== undefined ? { REDIS_URL: backends.redisUrl, REDIS_KEY_PREFIX: `${backends.redisPrefix}base:` } : {})
  }, await freePort(), startTimeoutMs)
}

/** VmRSS of a process in MB, from /proc/<pid>/status. */
export const rssMb = (pid: number): number | undefined => {
  try {
    const match = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return match === null ? undefined : Math.round(Number(match[1]) / 1024)
  } catch {
    return undefined
  }
}

/** utime + stime of a process in clock ticks (1/100 s), from /proc/<pid>/stat. */
export const cpuTicks = (pid: number): number | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return Number(fields[11]) + Number(fields[12])
  } catch {
    return undefined
  }
}

/** Write system calls a process made (write, writev: every socket write), from /proc/<pid>/io. */
export const writeCalls = (pid: number): number | undefined => {
  try {
    const match = /^syscw: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"))
    return match === null ? undefined : Number(match[1])
  } catch {
    return undefined
  }
}

/**
 * Waits until a server is quiet (under 5 % of a core for 300 ms, at most `maxMs`): after a round
 * it may still be writing audit batches, and on 2 cores that work would land in the next round,
 * which belongs to the other server. Returns the milliseconds waited.
 */
export const settle = async (pid: number, maxMs = 10_000): Promise<number> => {
  const start = Date.now()
  let last = cpuTicks(pid)
  while (Date.now() - start < maxMs) {
    await sleep(300)
    const now = cpuTicks(pid)
    if (now === undefined || last === undefined) break
    if (now - last <= 1.5) break
    last = now
  }
  return Date.now() - start
}
