/**
 * The Redis Cluster and the Sentinel group `.ci/run` starts for a whole test run, so the suites that
 * run once per Redis mode share them (docs/architecture.md#testing):
 *
 *   node scripts/redis-topologies.ts start <dir>   starts both (test/support/RedisTopology.ts), their
 *                                                  processes detached; writes <dir>/env, the
 *                                                  TEST_REDIS_* variables to source, and <dir>/pids
 *   node scripts/redis-topologies.ts stop <dir>    stops exactly the processes `start` wrote down
 *                                                  and removes their directories
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { startRedisCluster, startRedisSentinelGroup, stopProcesses } from "../test/support/RedisTopology.ts"

const start = async (dir: string) => {
  const cluster = await startRedisCluster({ detached: true })
  const group = await startRedisSentinelGroup({ detached: true }).catch(async (error: unknown) => {
    await cluster.stop()
    throw error
  })
  const processes = [...cluster.nodes, ...group.servers, ...group.sentinels]
  writeFileSync(join(dir, "pids"), `${processes.map((p) => p.pid()).join(" ")}\n${cluster.dir}\n${group.dir}\n`)
  writeFileSync(join(dir, "env"), [
    `export TEST_REDIS_CLUSTER_NODES=${cluster.seeds}`,
    `export TEST_REDIS_SENTINELS=${group.addresses}`,
    `export TEST_REDIS_SENTINEL_MASTER=${group.master}`,
    ""
  ].join("\n"))
  console.log(`Redis Cluster on ${cluster.seeds}; Sentinel group "${group.master}" on ${group.addresses}`)
}

const stop = async (dir: string) => {
  const file = join(dir, "pids")
  if (!existsSync(file)) return
  const [pids = "", ...dirs] = readFileSync(file, "utf8").split("\n")
  await stopProcesses(pids.split(" ").map(Number).filter((pid) => Number.isInteger(pid) && pid > 0))
  for (const d of dirs.filter((d) => d.trim() !== "")) rmSync(d, { recursive: true, force: true })
  rmSync(file)
}

const [command, dir] = process.argv.slice(2)
if ((command !== "start" && command !== "stop") || dir === undefined) {
  console.error("usage: node scripts/redis-topologies.ts start|stop <dir>")
  process.exit(2)
}
await (command === "start" ? start(dir) : stop(dir))
// The detached servers are not this process's to wait for.
process.exit(0)
