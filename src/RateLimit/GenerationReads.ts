/**
 * A Redis Cluster's generation reads, shared (RedisRateLimiter.ts): on a cluster a read's
 * generation is a command of its own, beside its rate check, and concurrent reads of one scope (the
 * list's record above all: every page reads it) would each send one. Here the reads asked for
 * before a flush share one command per key, issued at the flush — after every ask it answers, so
 * each reader observes a value at least as new as one read when it asked (the read cache's I1,
 * docs/architecture.md#its-invariants). An ask after the flush waits for the next one: never for a
 * command already issued. A flush is scheduled by the first ask after the previous one (one turn of
 * the event loop: the asks of every request that arrived in it).
 */

/** Sends one read of `key` (a generations record when `record`). */
export type SendRead = (key: string, record: boolean) => Promise<string>

interface Waiting {
  readonly record: boolean
  readonly promise: Promise<string>
  readonly resolve: (value: string) => void
  readonly reject: (cause: unknown) => void
}

export const sharedReads = (send: SendRead, schedule: (flush: () => void) => void = setImmediate) => {
  let waiting = new Map<string, Waiting>()
  let scheduled = false
  const flush = () => {
    scheduled = false
    const asked = waiting
    waiting = new Map()
    for (const [key, entry] of asked) send(key, entry.record).then(entry.resolve, entry.reject)
  }
  return (key: string, record: boolean): Promise<string> => {
    const pending = waiting.get(key)
    if (pending !== undefined) return pending.promise
    let resolve!: (value: string) => void
    let reject!: (cause: unknown) => void
    const promise = new Promise<string>((res, rej) => {
      resolve = res
      reject = rej
    })
    waiting.set(key, { record, promise, resolve, reject })
    if (!scheduled) {
      scheduled = true
      schedule(flush)
    }
    return promise
  }
}
