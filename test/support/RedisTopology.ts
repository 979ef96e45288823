/**
 * Private Redis topologies for the tests that run against a Redis Cluster or a Sentinel group
 * (docs/architecture.md#testing), started from the Debian `redis-server` binary on free loopback
 * ports in a temporary directory, without persistence:
 * - a cluster of three primaries with one replica each (`--cluster-enabled yes`, then
 *   `redis-cli --cluster create … --cluster-replicas 1`), ready once every node reports
 *   `cluster_state:ok`;
 * - a Sentinel group: one primary, one replica, three `redis-server --sentinel` processes, ready
 *   once every Sentinel knows the replica and the other Sentinels.
 * Timeouts are short (a node is failed after 1 s), so a killed primary's replica takes over in a
 * few seconds. `stop` stops exactly the processes it started and removes the directory.
 *
 * `detached`: the processes outlive the Node process that started them (`.ci/run` starts one of
 * each for the whole run through scripts/redis-topology.ts, and stops them by the pids it wrote).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { eventually } from "./Eventually.ts"
import { freeClusterPort, freePort } from "./Ports.ts"

export interface TopologyOptions {
  /** The processes outlive this one (not killed when it exits); default false. */
  readonly detached?: boolean
}

/** One `redis-server` process of a topology. */
export interface RedisProcess {
  readonly port: number
  readonly pid: () => number | undefined
  readonly running: () => boolean
  /** Stops it (SIGKILL by default: a crash) and resolves once it has exited. */
  readonly kill: (signal?: NodeJS.Signals) => Promise<void>
  /** Starts it again on the same port with the same configuration; resolves once it answers PING. */
  readonly start: () => Promise<void>
  /** SIGSTOP: it holds its connections and answers nothing (a frozen process), until `resume`. */
  readonly pause: () => void
  readonly resume: () => void
}

export interface RedisCluster {
  readonly kind: "cluster"
  readonly dir: string
  /** The six nodes, primaries first as `--cluster create` made them. */
  readonly nodes: ReadonlyArray<RedisProcess>
  /** `REDIS_CLUSTER_NODES`: every node (the service needs only some). */
  readonly seeds: string
  /** The node that is the primary of `key`'s slot now (asked of a node that is running). */
  readonly primaryOf: (key: string) => Promise<RedisProcess>
  /** The primaries now. */
  readonly primaries: () => Promise<ReadonlyArray<RedisProcess>>
  /** The replicas of `primary` now. */
  readonly replicasOf: (primary: RedisProcess) => Promise<ReadonlyArray<RedisProcess>>
  readonly stop: () => Promise<void>
}

export interface RedisSentinelGroup {
  readonly kind: "sentinel"
  readonly dir: string
  readonly master: string
  /** The primary and the replica, as started. */
  readonly servers: ReadonlyArray<RedisProcess>
  readonly sentinels: ReadonlyArray<RedisProcess>
  /** `REDIS_SENTINELS`. */
  readonly addresses: string
  /** The server the Sentinels name as the primary now. */
  readonly primary: () => Promise<RedisProcess>
  readonly stop: () => Promise<void>
}

/** One command over a fresh connection (RESP), its reply as text: readiness and topology queries, no client library. */
export const redisCall = (port: number, ...args: ReadonlyArray<string>) =>
  new Promise<string>((resolve, reject) => {
    const socket = connect(port, "127.0.0.1")
    let reply = ""
    socket.setTimeout(2000, () => socket.destroy(new Error(`redis at ${port}: no reply to ${args[0]}`)))
    socket.on("error", reject)
    socket.on("data", (chunk) => {
      reply += chunk.toString()
      if (complete(reply)) {
        socket.end()
        if (reply.startsWith("-")) reject(new Error(`redis at ${port}: ${reply.slice(1).trim()}`))
        else resolve(reply)
      }
    })
    socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`)
  })

/** Whether `text` holds one whole RESP reply (the replies asked for here are flat or one level of arrays). */
const complete = (text: string): boolean => {
  const parse = (at: number): number | undefined => {
    const end = text.indexOf("\r\n", at)
    if (end === -1) return undefined
    const head = text.slice(at + 1, end)
    switch (text[at]) {
      case "+":
      case "-":
      case ":":
        return end + 2
      case "$": {
        const length = Number(head)
        if (length < 0) return end + 2
        return text.length >= end + 2 + length + 2 ? end + 2 + length + 2 : undefined
      }
      case "*": {
        let next: number | undefined = end + 2
        for (let i = 0; i < Number(head) && next !== undefined; i++) next = parse(next)
        return next
      }
      default:
        return undefined
    }
  }
  return parse(0) !== undefined
}

/** The bulk strings of a reply, in order (nested arrays flattened). */
export const bulkStrings = (reply: string): Array<string> => {
  const out: Array<string> = []
  const lines = reply.split("\r\n")
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.startsWith("$") && Number(lines[i]!.slice(1)) >= 0) out.push(lines[++i]!)
  }
  return out
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Stops the processes `pids` (SIGTERM, then SIGKILL for one still there after 10 s); resolves once none is left. */
export const stopProcesses = async (pids: ReadonlyArray<number>) => {
  const running = pids.filter(alive)
  for (const pid of running) {
    process.kill(pid, "SIGTERM")
    process.kill(pid, "SIGCONT") // a paused process handles it only once it runs
  }
  const deadline = Date.now() + 10_000
  while (running.some(alive) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
  for (const pid of running.filter(alive)) process.kill(pid, "SIGKILL")
}

/** A `redis-server` with `args` on `port`, its output in `<dir>/redis-<port>.log`. */
const redisProcess = (dir: string, port: number, args: ReadonlyArray<string>, options: TopologyOptions): RedisProcess => {
  let child: ChildProcess | undefined
  let pid: number | undefined
  const log = join(dir, `redis-${port}.log`)
  const start = async () => {
    if (pid !== undefined && alive(pid)) throw new Error(`redis-server on ${port} is already running`)
    const out = openSync(log, "a")
    child = spawn("redis-server", [...args], { stdio: ["ignore", out, out], detached: options.detached === true })
    closeSync(out)
    pid = child.pid
    if (options.detached === true) child.unref()
    let exited = false
    child.once("exit", () => (exited = true))
    await eventually(async () => {
      if (exited) throw new Error(`redis-server on ${port} exited:\n${readFileSync(log, "utf8").slice(-2000)}`)
      return (await redisCall(port, "PING")).startsWith("+PONG")
    }, `redis-server on ${port} to answer PING`)
  }
  const kill = async (signal: NodeJS.Signals = "SIGKILL") => {
    const current = pid
    pid = undefined
    if (current === undefined || !alive(current)) return
    const exited = child !== undefined && child.exitCode === null && child.signalCode === null
      ? new Promise<void>((resolve) => child!.once("exit", () => resolve()))
      : eventually(() => !alive(current), `redis-server ${current} to exit`)
    process.kill(current, signal)
    if (signal !== "SIGKILL") process.kill(current, "SIGCONT") // a paused process handles it only once it runs
    await exited
  }
  const signal = (name: NodeJS.Signals) => () => {
    if (pid !== undefined) process.kill(pid, name)
  }
  return { port, pid: () => pid, running: () => pid !== undefined && alive(pid), kill, start, pause: signal("SIGSTOP"), resume: signal("SIGCONT") }
}

const COMMON = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"]

/**
 * A Redis Cluster of three primaries with one replica each. A failed node is declared failed after
 * 1 s (`cluster-node-timeout`), and a replica takes over however far it lagged (validity factor 0),
 * so a test that kills a primary sees its replica promoted in seconds.
 */
export const startRedisCluster = async (options: TopologyOptions = {}): Promise<RedisCluster> => {
  const dir = mkdtempSync(join(tmpdir(), "ads-redis-cluster-"))
  const ports: Array<number> = []
  while (ports.length < 6) {
    const port = await freeClusterPort()
    if (!ports.includes(port)) ports.push(port)
  }
  const nodes = ports.map((port) =>
    redisProcess(dir, port, [
      "--port", String(port), ...COMMON, "--dir", dir,
      "--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`,
      "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0"
    ], options)
  )
  const stop = async () => {
    await Promise.all(nodes.map((node) => node.kill("SIGTERM")))
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    await Promise.all(nodes.map((node) => node.start()))
    const created = spawnSync("redis-cli", [
      "--cluster", "create", ...ports.map((port) => `127.0.0.1:${port}`), "--cluster-replicas", "1", "--cluster-yes"
    ], { encoding: "utf8" })
    if (created.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${created.stdout}\n${created.stderr}`)
    await eventually(async () => {
      for (const port of ports) {
        if (!(await redisCall(port, "CLUSTER", "INFO")).includes("cluster_state:ok")) return false
      }
      return true
    }, "every node of the cluster to report cluster_state:ok")
  } catch (error) {
    await stop()
    throw error
  }
  const byPort = new Map(ports.map((port, i) => [port, nodes[i]!] as const))
  /** CLUSTER NODES, as asked of a node that is running: one entry per node. */
  const clusterNodes = async () => {
    const asked = nodes.find((node) => node.running())
    if (asked === undefined) throw new Error("no node of the cluster is running")
    const text = bulkStrings(await redisCall(asked.port, "CLUSTER", "NODES")).join("\n")
    return text.split("\n").filter((line) => line.trim() !== "").map((line) => {
      const [id, address, flags, master, , , , , ...ranges] = line.split(" ")
      return { id: id!, port: Number(address?.split("@")[0]?.split(":")[1]), flags: flags ?? "", master: master ?? "-", ranges, asked }
    })
  }
  return {
    kind: "cluster",
    dir,
    nodes,
    seeds: ports.map((port) => `127.0.0.1:${port}`).join(","),
    primaryOf: async (key) => {
      const entries = await clusterNodes()
      const slot = Number((await redisCall(entries[0]!.asked.port, "CLUSTER", "KEYSLOT", key)).match(/^:(\d+)/)![1])
      for (const { flags, ranges, port } of entries) {
        if (!flags.includes("master") || flags.includes("fail")) continue
        const owns = ranges.some((range) => {
          const [from, to = from] = range.split("-").map(Number)
          return slot >= from! && slot <= to!
        })
        if (owns && byPort.has(port)) return byPort.get(port)!
      }
      throw new Error(`no live primary holds slot ${slot}`)
    },
    primaries: async () =>
      (await clusterNodes()).filter((entry) => entry.flags.includes("master") && !entry.flags.includes("fail") && byPort.has(entry.port))
        .map((entry) => byPort.get(entry.port)!),
    replicasOf: async (primary) => {
      const entries = await clusterNodes()
      const id = entries.find((entry) => entry.port === primary.port)?.id
      return entries.filter((entry) => entry.master === id && byPort.has(entry.port)).map((entry) => byPort.get(entry.port)!)
    },
    stop
  }
}

/**
 * A Sentinel group: one primary, one replica, three Sentinels (quorum 2). A primary is failed
 * after 1 s without an answer (`down-after-milliseconds`), so a test that kills it sees the replica
 * promoted in a few seconds.
 */
export const startRedisSentinelGroup = async (options: TopologyOptions & { readonly master?: string } = {}): Promise<RedisSentinelGroup> => {
  const dir = mkdtempSync(join(tmpdir(), "ads-redis-sentinel-"))
  const master = options.master ?? "mymaster"
  const [primaryPort, replicaPort, ...sentinelPorts] = await Promise.all(Array.from({ length: 5 }, () => freePort()))
  const primary = redisProcess(dir, primaryPort!, ["--port", String(primaryPort), ...COMMON, "--dir", dir], options)
  const replica = redisProcess(dir, replicaPort!, [
    "--port", String(replicaPort), ...COMMON, "--dir", dir, "--replicaof", "127.0.0.1", String(primaryPort)
  ], options)
  const sentinels = sentinelPorts.map((port) => {
    const file = join(dir, `sentinel-${port}.conf`)
    writeFileSync(file, [
      `port ${port}`,
      "bind 127.0.0.1",
      `dir ${dir}`,
      `sentinel monitor ${master} 127.0.0.1 ${primaryPort} 2`,
      `sentinel down-after-milliseconds ${master} 1000`,
      `sentinel failover-timeout ${master} 5000`,
      `sentinel parallel-syncs ${master} 1`,
      ""
    ].join("\n"))
    return redisProcess(dir, port, [file, "--sentinel"], options)
  })
  const all = [primary, replica, ...sentinels]
  const stop = async () => {
    await Promise.all(all.map((p) => p.kill("SIGTERM")))
    rmSync(dir, { recursive: true, force: true })
  }
  const byPort = new Map([primary, replica].map((p) => [p.port, p] as const))
  const askPrimary = async () => {
    for (const sentinel of sentinels.filter((s) => s.running())) {
      try {
        const [, port] = bulkStrings(await redisCall(sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", master))
        const server = byPort.get(Number(port))
        if (server !== undefined) return server
      } catch {
        // the next Sentinel
      }
    }
    throw new Error("no Sentinel names a primary")
  }
  try {
    await primary.start()
    await replica.start()
    await eventually(async () => (await redisCall(replicaPort!, "INFO", "replication")).includes("master_link_status:up"), "the replica to sync")
    await Promise.all(sentinels.map((s) => s.start()))
    await eventually(async () => {
      for (const sentinel of sentinels) {
        const state = bulkStrings(await redisCall(sentinel.port, "SENTINEL", "MASTER", master))
        const field = (name: string) => Number(state[state.indexOf(name) + 1])
        if (field("num-slaves") < 1 || field("num-other-sentinels") < 2) return false
      }
      return true
    }, "every Sentinel to know the replica and the two other Sentinels")
  } catch (error) {
    await stop()
    throw error
  }
  return {
    kind: "sentinel",
    dir,
    master,
    servers: [primary, replica],
    sentinels,
    addresses: sentinels.map((s) => `127.0.0.1:${s.port}`).join(","),
    primary: askPrimary,
    stop
  }
}
