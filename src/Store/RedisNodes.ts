/**
 * What depends on the nodes behind a connection (Store/Redis.ts): a ping and a write that reach
 * every primary of a Redis Cluster (a primary that is down fails them though the others answer),
 * and the watch for values Redis may have lost or rolled back (a reconnection; in a cluster a
 * node's connection lost or a slot that changed primary).
 */
import { Cluster, type Redis } from "ioredis"

/** A connection (Redis.ts `RedisConnection`): one server or a Sentinel group's primary, or a Redis Cluster. */
type RedisConnection = Redis | Cluster

/**
 * PING on one server; in a cluster, PING on the primary of every slot: a primary that is down
 * (before its replica has taken its slots over) fails it, though the others answer.
 */
export const pingAll = async (client: RedisConnection): Promise<void> => {
  // Answered once the client is ready (the slot map known, in a cluster): the offline queue holds it until then.
  await client.ping()
  if (!(client instanceof Cluster)) return
  const nodes = new Map<string, Redis>(client.nodes("master").map((node) => [`${node.options.host}:${node.options.port}`, node]))
  await Promise.all([...slotOwners(client)].map((key) => {
    const node = nodes.get(key)
    return node === undefined ? Promise.reject(new Error(`Redis Cluster: primary ${key} is not connected`)) : node.ping()
  }))
}

/** Every primary of the cluster's slot map (`host:port`); a slot without one fails. */
const slotOwners = (client: Cluster): Set<string> => {
  const owners = new Set<string>()
  for (let slot = 0; slot < 16384; slot++) {
    const owner = client.slots[slot]?.[0]
    if (owner === undefined) throw new Error(`Redis Cluster: slot ${slot} has no primary`)
    owners.add(owner)
  }
  return owners
}

/**
 * Calls `listener` whenever the values Redis holds may have been lost or rolled back behind the
 * client's back: the connection ready again after it was lost (a restart, a Sentinel failover);
 * in a cluster also a node's connection lost (each ends for good and is made again) or a slot
 * that changed primary (a replica promoted, a resharding), seen when the slot map is refreshed.
 * Returns the function that stops it.
 */
export const onPossibleRollback = (client: RedisConnection, listener: () => void): () => void => {
  let readyBefore = client.status === "ready"
  const onReady = () => {
    if (readyBefore) listener()
    readyBefore = true
  }
  client.on("ready", onReady)
  if (!(client instanceof Cluster)) return () => client.off("ready", onReady)
  let owners = primaries(client)
  const onRefresh = () => {
    const now = primaries(client)
    // The first slot map (none before the cluster was first ready) replaces nothing.
    if (owners !== "" && now !== owners) listener()
    owners = now
  }
  client.on("-node", listener)
  client.on("refresh", onRefresh)
  return () => {
    client.off("ready", onReady)
    client.off("-node", listener)
    client.off("refresh", onRefresh)
  }
}

/** The slot map's primaries, as one text ("" before there is a map): a slot's primary is replaced, the text changes. */
const primaries = (client: Cluster): string => {
  if (client.slots.length === 0) return ""
  const ranges: Array<string> = []
  let previous: string | undefined
  for (let slot = 0; slot < 16384; slot++) {
    const owner = client.slots[slot]?.[0] ?? "-"
    if (owner !== previous) ranges.push(`${slot}:${owner}`)
    previous = owner
  }
  return ranges.join(",")
}

/** CRC16 (XMODEM), as Redis Cluster hashes keys. */
const CRC16_TABLE = Array.from({ length: 256 }, (_, byte) => {
  let crc = byte << 8
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  return crc
})
/** The cluster slot of a key without a hash tag of its own (ASCII). */
const slotOf = (text: string) => {
  let crc = 0
  for (let i = 0; i < text.length; i++) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ text.charCodeAt(i)) & 0xff]!
  return crc % 16384
}

/**
 * `SET <key> 1 PX <ttlMs>`: Redis takes a write under the prefix. In a cluster on every primary —
 * ACLs, a read-only replica promoted by mistake and `maxmemory` are each node's own — with one
 * key per primary, hash-tagged into one of its slots.
 */
export const writeAll = async (client: RedisConnection, key: string, ttlMs: number): Promise<void> => {
  if (!(client instanceof Cluster)) {
    await client.set(key, "1", "PX", ttlMs)
    return
  }
  await client.ping()
  const wanted = slotOwners(client)
  const tags: Array<string> = []
  for (let tag = 0; wanted.size > 0 && tag < 100_000; tag++) {
    const owner = client.slots[slotOf(String(tag))]![0]!
    if (wanted.delete(owner)) tags.push(String(tag))
  }
  await Promise.all(tags.map((tag) => client.set(`${key}:{${tag}}`, "1", "PX", ttlMs)))
}
