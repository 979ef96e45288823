/** The audit writers' bounds and deadlines (Writer.ts, StreamWriter.ts). */
import { Duration } from "effect"
import { JOURNAL_SHARDS } from "./Journal.ts"
import { INSERT_BATCH_MAX } from "./Repo.ts"

export interface WriterOptions {
  /** Records per INSERT, and per journal entry (tests make it small to split entries across batches). */
  readonly batchMax: number
  /** Records the in-process buffer holds while the database is unreachable. */
  readonly bufferMax: number
  /** Estimated bytes the in-process buffer holds at most (records are up to ~25 KB); records over it are refused and counted. */
  readonly bufferMaxBytes: number
  /** Records the Redis Stream may hold before new records are refused (and counted); its entries hold several (Journal.ts). */
  readonly streamMax: number
  /**
   * Records appended to the stream that the Redis writer holds in memory until their batch
   * commits; past it (PostgreSQL down or slow) they wait in the stream for the recovery scan.
   */
  readonly streamHeldMax: number
  /**
   * With Redis: how long the writer waits for more journaled records before it inserts a batch
   * smaller than the largest (the records are durable in the stream meanwhile; this only delays
   * their visibility in the database): fewer, larger INSERTs and XDELs under load.
   */
  readonly commitLinger: Duration.Input
  /**
   * How many of the journal's shards the Redis writer appends to, in turn: all of them (the model
   * tests use fewer, so that a failover's reissued ids meet the writer's own entries within a few
   * appends). Every shard is read back whatever this says.
   */
  readonly appendShards: number
  /** How long a pending stream entry of another consumer waits before it is claimed. */
  readonly claimIdle: Duration.Input
  /** How long closing the scope may spend flushing. */
  readonly flushTimeout: Duration.Input
}

export const defaultWriterOptions: WriterOptions = {
  batchMax: INSERT_BATCH_MAX,
  bufferMax: 100_000,
  bufferMaxBytes: 64 * 1024 * 1024,
  streamMax: 1_000_000,
  streamHeldMax: 5_000,
  commitLinger: "10 millis",
  appendShards: JOURNAL_SHARDS,
  claimIdle: "30 seconds",
  // docs/operations.md#shutdown: exit within 10 s of SIGTERM, flush included: main.ts drains HTTP for 5 s first.
  flushTimeout: "3500 millis"
}

/** How long the flush may take from now. */
export const flushBudgetMs = (options: WriterOptions, deadline: { readonly at: () => number | undefined }) => {
  const ms = Duration.toMillis(Duration.fromInputUnsafe(options.flushTimeout))
  const at = deadline.at()
  return at === undefined ? ms : Math.max(0, Math.min(ms, at - Date.now()))
}
