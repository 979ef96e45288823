/**
 * The Redis modes a test run offers (docs/architecture.md#testing): one server (`TEST_REDIS_URL`),
 * a Redis Cluster (`TEST_REDIS_CLUSTER_NODES`) and a Sentinel group (`TEST_REDIS_SENTINELS`,
 * `TEST_REDIS_SENTINEL_MASTER`). `.ci/run` starts a cluster and a Sentinel group for the whole
 * run and sets all of them; on a machine where they are unset the suites register their cases only
 * for the modes that are there (none at all on a fresh machine), never skipped.
 */
import { Option, Redacted } from "effect"
import { parseRedisNodes, type RedisTarget, singleRedis } from "../../src/Config/Redis.ts"
import { makeRedis, type RedisConnection } from "../../src/Store/Redis.ts"
import { TEST_REDIS_URL } from "./TestApp.ts"

export type RedisModeName = "one server" | "Redis Cluster" | "Sentinel"

export interface RedisMode {
  readonly name: RedisModeName
  readonly target: RedisTarget
  /** The service's settings for it (a child process's environment). */
  readonly env: Readonly<Record<string, string>>
}

const nodes = (raw: string) => {
  const parsed = parseRedisNodes(raw)
  if (parsed._tag === "Failure") throw new Error(`not a list of host:port: ${raw}`)
  return parsed.success
}

/** The target and settings of a Redis Cluster whose nodes are `seeds` (`host:port,…`). */
export const clusterMode = (seeds: string): RedisMode => ({
  name: "Redis Cluster",
  target: { topology: { _tag: "Cluster", nodes: nodes(seeds) }, username: Option.none(), password: Option.none(), tls: false },
  env: { REDIS_CLUSTER_NODES: seeds }
})

/** The target and settings of the Sentinel group `master` watched by `sentinels` (`host:port,…`). */
export const sentinelMode = (sentinels: string, master: string): RedisMode => ({
  name: "Sentinel",
  target: {
    topology: { _tag: "Sentinel", sentinels: nodes(sentinels), master, sentinelUsername: Option.none(), sentinelPassword: Option.none() },
    username: Option.none(),
    password: Option.none(),
    tls: false
  },
  env: { REDIS_SENTINELS: sentinels, REDIS_SENTINEL_MASTER: master }
})

export const singleMode = (url: string): RedisMode => ({ name: "one server", target: singleRedis(Redacted.make(url)), env: { REDIS_URL: url } })

const clusterSeeds = process.env["TEST_REDIS_CLUSTER_NODES"]
const sentinels = process.env["TEST_REDIS_SENTINELS"]

/** Every mode this run has a Redis for, one server first. */
export const redisModes: ReadonlyArray<RedisMode> = [
  ...(TEST_REDIS_URL !== undefined ? [singleMode(TEST_REDIS_URL)] : []),
  ...(clusterSeeds !== undefined && clusterSeeds !== "" ? [clusterMode(clusterSeeds)] : []),
  ...(sentinels !== undefined && sentinels !== "" ? [sentinelMode(sentinels, process.env["TEST_REDIS_SENTINEL_MASTER"] || "mymaster")] : [])
]

/** A connection of the test's own (to look at or change what the service keeps); give it back with `disconnect()`. */
export const connectTo = (mode: RedisMode): RedisConnection => {
  const client = makeRedis(mode.target)
  client.on("error", () => {})
  return client
}
