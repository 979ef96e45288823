/**
 * The Redis commands the audit journal's writer sends (docs/audit.md#the-redis-journal), as one
 * narrow interface: the writer's bookkeeping depends on what these calls do, not on the client
 * that carries them, so a model of the stream (in memory, with JOURNAL_LUA's semantics) can stand
 * in for Redis in tests. The streams are named by layout: `v1` holds one record an entry, `v2`
 * entries of many (Journal.ts).
 */
import { Effect } from "effect"
import { defineScript, isDisconnected, type RedisClient, type RedisError, redisCommand } from "../Store/Redis.ts"
import type { StoredEntry } from "./Entry.ts"
import { encodeRecords, JOURNAL_LUA, journalKeys } from "./Journal.ts"

/** A journal stream by its layout. */
export type JournalStream = "v1" | "v2"

/** A `v2` entry to delete, with the number of records it was counted with in the stream's total. */
export interface Deletion {
  readonly id: string
  readonly records: number
}

export interface JournalStore {
  /** True while a command would only wait (the connection is lost and not back): fail over at once. */
  readonly isDown: () => boolean
  /**
   * One JOURNAL_LUA call on `v2`: appends `records` as one entry (none when empty) and deletes
   * `deletions`; answers the new entry's id (undefined: none) and the records the stream then holds.
   */
  readonly journal: (
    records: ReadonlyArray<StoredEntry>,
    deletions: ReadonlyArray<Deletion>,
    timeoutMs?: number
  ) => Effect.Effect<{ readonly id: string | undefined; readonly held: number | undefined }, RedisError>
  /** XRANGE `start` `end` COUNT `count`, as Redis answers it (Journal.ts `parseJournal` reads it). */
  readonly range: (stream: JournalStream, start: string, end: string, count: number) => Effect.Effect<unknown, RedisError>
  /** XDEL on `v1` (its entries are not counted). */
  readonly deleteV1: (ids: ReadonlyArray<string>) => Effect.Effect<void, RedisError>
  /** The id of a stream's last entry (null: empty). */
  readonly lastId: (stream: JournalStream) => Effect.Effect<string | null, RedisError>
  /** Redis's clock in ms (TIME), so that "older than claimIdle" holds whatever this host's clock says. */
  readonly now: Effect.Effect<number, RedisError>
}

/** The journal on the process's Redis connection; every command has a deadline (Store/Redis.ts). */
export const redisJournalStore = ({ client, prefix }: RedisClient["Service"]): JournalStore => {
  const keys = journalKeys(prefix)
  const script = defineScript<[string, number]>(client, "auditJournal", 2, JOURNAL_LUA)
  return {
    isDown: () => isDisconnected(client),
    // Issued as a single command, the client's auto-pipelining sends it in the same write as the
    // other commands of the moment (rate checks, bumps): one write per round trip. Encoded inside
    // the command, so that a record that cannot be encoded fails the call (to the buffer), not the caller.
    journal: (records, deletions, timeoutMs) =>
      redisCommand(records.length === 0 ? "XDEL" : "XADD", () => {
        const args: Array<string | number> = [keys.v2, keys.records, records.length, records.length === 0 ? "" : encodeRecords(records)]
        for (const { id, records: count } of deletions) args.push(id, count)
        return script(...args)
      }, timeoutMs).pipe(
        Effect.map(([id, held]) => ({
          id: typeof id === "string" && id !== "" ? id : undefined,
          held: typeof held === "number" ? held : undefined
        }))
      ),
    range: (stream, start, end, count) => redisCommand("XRANGE", () => client.xrange(keys[stream], start, end, "COUNT", count)),
    deleteV1: (ids) => Effect.asVoid(redisCommand("XDEL", () => client.xdel(keys.v1, ...ids))),
    lastId: (stream) =>
      redisCommand("XREVRANGE", () => client.xrevrange(keys[stream], "+", "-", "COUNT", 1)).pipe(Effect.map((last) => last[0]?.[0] ?? null)),
    now: redisCommand("TIME", () => client.time()).pipe(Effect.map((time) => Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)))
  }
}
