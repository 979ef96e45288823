/**
 * A Redis failover a test can drive (docs/operations.md#redis-failover), on a private topology
 * (RedisTopology.ts): the primary holding some keys is killed while what would replace it is held
 * back, then the replacement is let happen — in a Redis Cluster (a replica takes the killed
 * primary's slots) and in a Sentinel group (the Sentinels promote the replica). The replacement
 * waits until the test has seen the outage: the killed primary's replicas are paused with SIGSTOP
 * and resumed (in a cluster); the Sentinels are told to wait an hour before they call the primary
 * down, then 1 s (pausing them instead would throw them into TILT mode for 30 s). A test waits for
 * events, never for time.
 */
import { clusterMode, type RedisMode, sentinelMode } from "./RedisModes.ts"
import { redisCall, type RedisProcess, startRedisCluster, startRedisSentinelGroup } from "./RedisTopology.ts"
import { eventually } from "./Eventually.ts"

export interface KillOptions {
  /**
   * Runs with the replacement paused and cut off from the primary (its replication connection
   * killed: a paused process's socket would still take in what the primary sends), the primary
   * still up, before the kill: what is written meanwhile reaches the primary only, so the replica
   * promoted afterwards lags behind it (in a Sentinel group the replica is paused for it too).
   */
  readonly lagging?: () => Promise<void>
}

/** Closes `primary`'s connections to its replicas (paused ones cannot come back), then runs `lagging`. */
const lagBehind = async (primary: RedisProcess, lagging: () => Promise<void>) => {
  await redisCall(primary.port, "CLIENT", "KILL", "TYPE", "replica")
  await lagging()
}

/** What a test needs of a topology: the keys it must find on the primary it kills, and the kill. */
export interface Failover {
  readonly mode: RedisMode
  /** Whether `keys` are on one primary (always, but in a cluster). */
  readonly together: (keys: ReadonlyArray<string>) => Promise<boolean>
  /** Pauses what would replace the primary holding `keys`, kills that primary. */
  readonly kill: (keys: ReadonlyArray<string>, options?: KillOptions) => Promise<void>
  /** Lets the replacement happen; resolves with the new primary once it serves. */
  readonly release: () => Promise<RedisProcess>
  /** How many of this run's connections subscribe `channel` on `server` (sharded in a cluster). */
  readonly subscribers: (server: RedisProcess, channel: string) => Promise<number>
  readonly stop: () => Promise<void>
}

const numsub = async (server: RedisProcess, command: string, channel: string) =>
  Number((await redisCall(server.port, "PUBSUB", command, channel)).split("\r\n").find((line) => line.startsWith(":"))?.slice(1) ?? 0)

export const clusterFailover = async (): Promise<Failover> => {
  const cluster = await startRedisCluster()
  let killed: RedisProcess | undefined
  let key = ""
  let paused: ReadonlyArray<RedisProcess> = []
  const primaries = (keys: ReadonlyArray<string>) => Promise.all(keys.map((k) => cluster.primaryOf(k)))
  return {
    mode: clusterMode(cluster.seeds),
    together: async (keys) => new Set(await primaries(keys)).size === 1,
    kill: async (keys, options = {}) => {
      const owners = await primaries(keys)
      if (new Set(owners).size !== 1) throw new Error("the keys are not on one primary")
      killed = owners[0]!
      key = keys[0]!
      paused = await cluster.replicasOf(killed)
      for (const replica of paused) replica.pause()
      if (options.lagging !== undefined) await lagBehind(killed, options.lagging)
      await killed.kill()
    },
    release: async () => {
      for (const replica of paused) replica.resume()
      return eventually(async () => {
        const primary = await cluster.primaryOf(key)
        return primary !== killed && (await redisCall(primary.port, "CLUSTER", "INFO")).includes("cluster_state:ok") && primary
      }, "a replica to take the killed primary's slots")
    },
    subscribers: (server, channel) => numsub(server, "SHARDNUMSUB", channel),
    stop: cluster.stop
  }
}

export const sentinelFailover = async (): Promise<Failover> => {
  const group = await startRedisSentinelGroup()
  let killed: RedisProcess | undefined
  let paused: RedisProcess | undefined
  const downAfter = (ms: number) =>
    Promise.all(group.sentinels.map((s) => redisCall(s.port, "SENTINEL", "SET", group.master, "down-after-milliseconds", String(ms))))
  return {
    mode: sentinelMode(group.addresses, group.master),
    together: async () => true,
    kill: async (_keys, options = {}) => {
      killed = await group.primary()
      await downAfter(3_600_000)
      if (options.lagging !== undefined) {
        paused = group.servers.find((server) => server !== killed)
        paused?.pause()
        await lagBehind(killed, options.lagging)
      }
      await killed.kill()
    },
    release: async () => {
      paused?.resume()
      await downAfter(1000)
      return eventually(async () => {
        const primary = await group.primary()
        return primary !== killed && (await redisCall(primary.port, "ROLE")).includes("master") && primary
      }, "the Sentinels to promote the replica")
    },
    subscribers: (server, channel) => numsub(server, "NUMSUB", channel),
    stop: group.stop
  }
}
