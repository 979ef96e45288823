/**
 * The Redis commands the audit journal's writer sends (docs/audit.md#the-redis-journal), as one
 * narrow interface: the writer's bookkeeping depends on what these calls do, not on the client
 * that carries them, so a model of the streams (in memory, with JOURNAL_LUA's semantics) can stand
 * in for Redis in tests. The streams are named by layout (Journal.ts): a v3 shard (`s0`…`s15`),
 * `v2` or `v1`.
 */
import { Effect } from "effect"
import { defineScript, isDisconnected, type RedisClient, type RedisError, redisCommand } from "../Store/Redis.ts"
import type { StoredEntry } from "./Entry.ts"
import { countKey, type CountedStream, encodeRecords, JOURNAL_LUA, type JournalStream, SHARDS, streamKey } from "./Journal.ts"

/** An entry to delete: where it is, its id, and its batch id (`""`: it has none) — it is deleted only if it still carries that one. */
export interface Deletion<S extends CountedStream = CountedStream> {
  readonly stream: S
  readonly id: string
  readonly batch: string
}

/** An entry to append: its records and its batch id (unique). */
export interface Append {
  readonly records: ReadonlyArray<StoredEntry>
  readonly batch: string
}

export interface JournalStore {
  /** True while a command would only wait (the connection is lost and not back): fail over at once. */
  readonly isDown: () => boolean
  /**
   * The streams a recovery scan reads: the v3 shards, and v2 and v1 where instances may have
   * written them (not in a Redis Cluster, where they never did).
   */
  readonly streams: ReadonlyArray<JournalStream>
  /**
   * One JOURNAL_LUA call on `stream`: appends `append` as one entry (none when undefined) and
   * deletes `deletions` (each of `stream`); answers the new entry's id (undefined: none) and the
   * records the stream then holds.
   */
  readonly journal: (
    stream: CountedStream,
    append: Append | undefined,
    deletions: ReadonlyArray<Deletion>,
    timeoutMs?: number
  ) => Effect.Effect<{ readonly id: string | undefined; readonly held: number | undefined }, RedisError>
  /** XRANGE `start` `end` COUNT `count`, as Redis answers it (Journal.ts `parseJournal` reads it). */
  readonly range: (stream: JournalStream, start: string, end: string, count: number, timeoutMs?: number) => Effect.Effect<unknown, RedisError>
  /** XDEL on `v1` (its entries are not counted). */
  readonly deleteV1: (ids: ReadonlyArray<string>) => Effect.Effect<void, RedisError>
  /** The id of a stream's last entry (null: empty). */
  readonly lastId: (stream: JournalStream) => Effect.Effect<string | null, RedisError>
  /** Redis's clock in ms (TIME), so that "older than claimIdle" holds whatever this host's clock says. */
  readonly now: Effect.Effect<number, RedisError>
}

/** The streams of a Redis in `mode`: v2 and v1 are not read in a cluster. */
export const journalStreams = (cluster: boolean): ReadonlyArray<JournalStream> => cluster ? SHARDS : ["v1", "v2", ...SHARDS]

/** The journal on the process's Redis connection; every command has a deadline (Store/Redis.ts). */
export const redisJournalStore = ({ client, mode, prefix }: RedisClient["Service"]): JournalStore => {
  const script = defineScript<[string, number]>(client, "auditJournal", 2, JOURNAL_LUA)
  return {
    isDown: () => isDisconnected(client),
    streams: journalStreams(mode === "cluster"),
    // Issued as a single command, the client's auto-pipelining sends it in the same write as the
    // other commands of the moment (rate checks, bumps): one write per round trip. Encoded inside
    // the command, so that a record that cannot be encoded fails the call (to the buffer), not the caller.
    journal: (stream, append, deletions, timeoutMs) =>
      redisCommand(append === undefined ? "XDEL" : "XADD", () => {
        const args: Array<string | number> = [streamKey(prefix, stream), countKey(prefix, stream)]
        if (append === undefined) args.push(0, "", "")
        else args.push(append.records.length, encodeRecords(append.records), append.batch)
        for (const { batch, id } of deletions) args.push(id, batch)
        return script(...args)
      }, timeoutMs).pipe(
        Effect.map(([id, held]) => ({
          id: typeof id === "string" && id !== "" ? id : undefined,
          held: typeof held === "number" ? held : undefined
        }))
      ),
    range: (stream, start, end, count, timeoutMs) =>
      redisCommand("XRANGE", () => client.xrange(streamKey(prefix, stream), start, end, "COUNT", count), timeoutMs),
    deleteV1: (ids) => Effect.asVoid(redisCommand("XDEL", () => client.xdel(streamKey(prefix, "v1"), ...ids))),
    lastId: (stream) =>
      redisCommand("XREVRANGE", () => client.xrevrange(streamKey(prefix, stream), "+", "-", "COUNT", 1)).pipe(Effect.map((last) => last[0]?.[0] ?? null)),
    now: redisCommand("TIME", () => client.time()).pipe(Effect.map((time) => Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)))
  }
}
