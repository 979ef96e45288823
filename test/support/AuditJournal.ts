/**
 * What a service left in its audit journal in Redis (src/AuditLogs/Journal.ts,
 * docs/audit.md#the-redis-journal): the entries of both streams, read back as the next instance's
 * recovery scan reads them.
 */
import type { RedisConnection } from "../../src/Store/Redis.ts"
import { type JournalEntry, journalKeys, parseJournal } from "../../src/AuditLogs/Journal.ts"

export { journalKeys }

/** The entries of the v1 and v2 streams. */
export const journalEntries = async (redis: RedisConnection, prefix: string): Promise<{ v1: Array<JournalEntry>; v2: Array<JournalEntry> }> => {
  const keys = journalKeys(prefix)
  const [v1, v2] = await Promise.all([redis.xrange(keys.v1, "-", "+"), redis.xrange(keys.v2, "-", "+")])
  return { v1: parseJournal(v1), v2: parseJournal(v2) }
}

/** Every record still in the journal, both streams. */
export const journalRecords = async (redis: RedisConnection, prefix: string) => {
  const { v1, v2 } = await journalEntries(redis, prefix)
  return [...v1, ...v2].flatMap((e) => e.records)
}
