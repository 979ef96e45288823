/**
 * Writes in batches (docs/architecture.md#writes-in-batches): a `RequestResolver` whose batches are
 * written one at a time. While a batch is being written, the requests that arrive wait and go
 * together as the next one; with none in flight a batch goes at once (after one yield, so the
 * requests of the same tick join it): no timer, so a lone write pays no latency. Which requests
 * make a batch and in what order — the order they were received — is decided here; what a batch
 * does with them is `write`'s (Writes.ts).
 *
 * Bounds: at most `maxSize` requests and `maxBytes` (their `bytesOf`) per batch; a full batch is
 * written at once, after the one in flight. A batch waits for the one in flight at most `maxWaitMs`
 * (the statement deadline: a statement that outlives it has failed anyway), then is written beside
 * it, as concurrent lone writes would be, rather than queueing behind a database that does not answer.
 */
import { Deferred, Effect, type Request, RequestResolver } from "effect"
import type { NonEmptyArray } from "effect/Array"

export interface WriteBatchesOptions<R extends Request.Any> {
  readonly maxSize: number
  readonly maxBytes: number
  readonly bytesOf: (request: R) => number
  readonly maxWaitMs: number
  /** Writes a batch, its entries in the order received; completes every entry, fails never. */
  readonly write: (entries: NonEmptyArray<Request.Entry<R>>) => Effect.Effect<void>
}

const ONE_KEY = {}

export const writeBatches = <R extends Request.Any>(options: WriteBatchesOptions<R>): RequestResolver.RequestResolver<R> => {
  /** The batch written last: in flight until done. */
  let last: Deferred.Deferred<void> | undefined
  const inFlight = () => (last === undefined || Deferred.isDoneUnsafe(last) ? undefined : last)
  const awaitEnd = (batch: Deferred.Deferred<void>) =>
    Effect.asVoid(Effect.timeoutOption(Deferred.await(batch), options.maxWaitMs))
  const fits = (entries: ReadonlySet<Request.Entry<R>>) => {
    if (entries.size >= options.maxSize) return false
    let bytes = 0
    for (const entry of entries) bytes += options.bytesOf(entry.request)
    return bytes < options.maxBytes
  }
  return RequestResolver.makeWith<R>({
    batchKey: () => ONE_KEY,
    delay: Effect.suspend(() => {
      const previous = inFlight()
      return previous === undefined ? Effect.yieldNow : awaitEnd(previous)
    }),
    collectWhile: fits,
    runAll: (entries) =>
      Effect.suspend(() => {
        // A full batch comes here without its delay: it too waits for the one in flight.
        const previous = inFlight()
        const mine = Deferred.makeUnsafe<void>()
        last = mine
        const write = Effect.ensuring(options.write(entries), Deferred.succeed(mine, undefined))
        return previous === undefined ? write : Effect.andThen(awaitEnd(previous), write)
      })
  })
}
