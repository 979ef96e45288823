/**
 * Facts about the process's life that any part may read: when its shutdown must be over. main.ts
 * provides them; the audit writer's flush (AuditLogs/Writer.ts, StreamWriter.ts) reads them.
 */
import { Context } from "effect"

/**
 * When the process's shutdown must be over (epoch ms), once a signal has started it: main.ts
 * provides it (exit within 10 s of SIGTERM in every state: docs/operations.md#shutdown). The audit flush at
 * shutdown (AuditLogs/WriterOptions.ts `flushBudgetMs`) ends at `flushTimeout` or at this moment, whichever comes first,
 * so that a drain of the requests in flight that took its whole 5 s still leaves the closing of
 * Redis and the pool their time. Undefined (the default, and tests closing a scope): `flushTimeout` alone.
 */
export const ShutdownDeadline = Context.Reference<{ readonly at: () => number | undefined }>(
  "Lifecycle/ShutdownDeadline",
  { defaultValue: () => ({ at: () => undefined }) }
)
