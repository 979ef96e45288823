/**
 * What a service left in its audit journal in Redis (src/AuditLogs/Journal.ts,
 * docs/audit.md#the-redis-journal): the entries of every stream, read back as the next instance's
 * recovery scan reads them.
 */
import type { RedisConnection } from "../../src/Store/Redis.ts"
import { type JournalEntry, type JournalStream, parseJournal, SHARDS, streamKey } from "../../src/AuditLogs/Journal.ts"

/** The entries of v1, v2 (not in a Redis Cluster, where they never are) and the v3 shards (all together). */
export const journalEntries = async (
  redis: RedisConnection,
  prefix: string
): Promise<{ v1: Array<JournalEntry>; v2: Array<JournalEntry>; v3: Array<JournalEntry> }> => {
  const read = async (stream: JournalStream) => parseJournal(await redis.xrange(streamKey(prefix, stream), "-", "+"))
  const [v1, v2, ...shards] = await Promise.all([read("v1"), read("v2"), ...SHARDS.map(read)])
  return { v1: v1!, v2: v2!, v3: shards.flat() }
}

/** Every record still in the journal, every stream. */
export const journalRecords = async (redis: RedisConnection, prefix: string) => {
  const { v1, v2, v3 } = await journalEntries(redis, prefix)
  return [...v1, ...v2, ...v3].flatMap((e) => e.records)
}
