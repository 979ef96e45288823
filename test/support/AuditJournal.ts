/**
 * What a service left in its audit journal in Redis (src/AuditLogs/Journal.ts,
 * docs/audit.md#the-redis-journal): the entries of both streams, read back as the next instance's
 * recovery scan reads them.
 */
import type { RedisConnection } from "../../src/Store/Redis.ts"
import { type JournalEntry, journalKeys, parseJournal } from "../../src/AuditLogs/Journal.ts"

export { journalKeys }

/** The entries of this release's stream (`current`) and of the previous release's (`legacy`). */
export const journalEntries = async (redis: RedisConnection, prefix: string): Promise<{ legacy: Array<JournalEntry>; current: Array<JournalEntry> }> => {
  const keys = journalKeys(prefix)
  const [legacy, current] = await Promise.all([redis.xrange(keys.legacy, "-", "+"), redis.xrange(keys.current, "-", "+")])
  return { legacy: parseJournal(legacy), current: parseJournal(current) }
}

/** Every record still in the journal, both streams. */
export const journalRecords = async (redis: RedisConnection, prefix: string) => {
  const { legacy, current } = await journalEntries(redis, prefix)
  return [...legacy, ...current].flatMap((e) => e.records)
}
