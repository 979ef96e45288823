/**
 * The audit writer (docs/audit.md#guarantees): `record` never touches the database; a writer fiber inserts
 * records in batches, and nothing is lost.
 *
 * - In-process (here): a bounded buffer (Buffer.ts). A failed batch is retried with capped
 *   backoff until PostgreSQL answers (Inserter.ts); overflow is counted and logged (Dropped.ts);
 *   closing the scope (SIGTERM) flushes the buffer and the batch in flight.
 * - With Redis: StreamWriter.ts, which uses the same buffer as its fallback.
 */
import { Effect } from "effect"
import { ShutdownDeadline } from "../Lifecycle.ts"
import { makeBuffer } from "./Buffer.ts"
import { type AuditEntry, newEntry } from "./Entry.ts"
import { defaultWriterOptions, flushBudgetMs, type WriterOptions } from "./WriterOptions.ts"

/** In-process writer (no Redis). */
export const makeBufferedAuditLog = (options: WriterOptions = defaultWriterOptions) =>
  Effect.gen(function*() {
    const buffer = yield* makeBuffer(options)
    const shutdown = yield* ShutdownDeadline
    yield* Effect.addFinalizer(() => Effect.suspend(() => buffer.flush(flushBudgetMs(options, shutdown))))
    return { record: (entry: AuditEntry): Effect.Effect<void> => buffer.offer(newEntry(entry)) }
  })
