/**
 * In-memory stand-ins for what the audit journal's writer talks to (src/AuditLogs/JournalStore.ts,
 * docs/audit.md#the-redis-journal), with faults a test switches on: the two streams with
 * JOURNAL_LUA's semantics (test/integration/audit.journal.redis.test.ts holds them to a real Redis),
 * and PostgreSQL's `audit_logs` (stored once by entry id, as ON CONFLICT DO NOTHING does). Every
 * call takes virtual time (`Effect.sleep`), so a test on fake timers decides the interleavings.
 * A process's calls go through its own handle: once it is killed (`alive = false`) they never
 * complete and change nothing, as a dead process's calls.
 */
import { Effect, Layer } from "effect"
import { SqlError } from "effect/sql"
import type { StoredEntry } from "../../src/AuditLogs/Entry.ts"
import { encodeRecords } from "../../src/AuditLogs/Journal.ts"
import type { Deletion, JournalStore, JournalStream } from "../../src/AuditLogs/JournalStore.ts"
import { AuditRepo } from "../../src/AuditLogs/Repo.ts"
import { COMMAND_TIMEOUT_MS, RedisError, RedisTimeout } from "../../src/Store/Redis.ts"

/** One process's view: its calls stop (never complete, change nothing) once it is killed. */
export interface Handle {
  alive: boolean
}

/**
 * How Redis answers: `up` in 1 ms; `slow` in 150 ms (past a request's 100 ms wait); `silent`
 * accepts, applies every other command, and never answers (the caller's deadline fails it);
 * `refusing`: disconnected, every command fails at once and changes nothing.
 */
export type RedisMode = "up" | "slow" | "silent" | "refusing"

export type Fields = ReadonlyArray<string>
type Entry = { readonly id: string; readonly fields: Fields }

const parseId = (id: string): [number, number] => {
  const [ms = "0", seq] = id.split("-")
  return [Number(ms), seq === undefined ? Number.NaN : Number(seq)]
}
const compare = ([a, b]: [number, number], [c, d]: [number, number]) => a !== c ? a - c : b - d

/** Whether `id` is at or after `start` (XRANGE's `-`, `id`, `ms` or `(id`). */
const afterStart = (id: [number, number], start: string) => {
  if (start === "-") return true
  const exclusive = start.startsWith("(")
  const [ms, seq] = parseId(exclusive ? start.slice(1) : start)
  const c = compare(id, [ms, Number.isNaN(seq) ? 0 : seq])
  return exclusive ? c > 0 : c >= 0
}
/** Whether `id` is at or before `end` (`+`, `id`, or `ms`: every id of that millisecond). */
const beforeEnd = (id: [number, number], end: string) => {
  if (end === "+") return true
  const [ms, seq] = parseId(end)
  return compare(id, [ms, Number.isNaN(seq) ? Number.MAX_SAFE_INTEGER : seq]) <= 0
}

/** The journal's Redis keys in memory: the `v1` and `v2` streams and `v2`'s record count. */
export class MemoryJournal {
  readonly streams: Record<JournalStream, Array<Entry>> = { v1: [], v2: [] }
  /** `audit:stream:v2:records` (undefined: no such key). */
  count: number | undefined = undefined
  mode: RedisMode = "up"
  private last: [number, number] = [0, 0]
  private silentCalls = 0
  /** Sees every entry as it is deleted, before it goes. */
  onDelete: (stream: JournalStream, entry: Entry) => void = () => {}

  xadd(stream: JournalStream, fields: Fields): string {
    const now = Date.now()
    this.last = now > this.last[0] ? [now, 0] : [this.last[0], this.last[1] + 1]
    const id = `${this.last[0]}-${this.last[1]}`
    this.streams[stream].push({ id, fields })
    return id
  }

  xdel(stream: JournalStream, id: string): number {
    const entries = this.streams[stream]
    const at = entries.findIndex((e) => e.id === id)
    if (at < 0) return 0
    this.onDelete(stream, entries[at]!)
    entries.splice(at, 1)
    return 1
  }

  xrange(stream: JournalStream, start: string, end: string, count: number): Array<[string, Array<string>]> {
    return this.streams[stream]
      .filter((e) => afterStart(parseId(e.id), start) && beforeEnd(parseId(e.id), end))
      .slice(0, count)
      .map((e) => [e.id, [...e.fields]])
  }

  /** JOURNAL_LUA (src/AuditLogs/Journal.ts), step by step. */
  script(n: number, records: string, deletions: ReadonlyArray<Deletion>): [string, number] {
    let id = ""
    let change = 0
    if (n !== 0) {
      id = this.xadd("v2", ["n", String(n), "r", records])
      change = n
    }
    for (const d of deletions) change -= this.xdel("v2", d.id) * d.records
    if (deletions.length > 0 && this.streams.v2.length === 0) {
      this.count = undefined
      return [id, 0]
    }
    let held = (this.count ?? 0) + change
    if (held < 0) held = 0
    this.count = held
    return [id, held]
  }

  /**
   * One command as `mode` has it: `apply` runs when Redis executes it; what the caller gets is its
   * answer, a failure, or (silent) its deadline's failure.
   */
  private command<A>(handle: Handle, name: string, apply: () => A, timeoutMs = COMMAND_TIMEOUT_MS): Effect.Effect<A, RedisError> {
    return Effect.suspend((): Effect.Effect<A, RedisError> => {
      if (!handle.alive) return Effect.never
      const failure = (cause: unknown) => new RedisError({ command: name, cause })
      switch (this.mode) {
        case "refusing":
          return Effect.fail(failure(new Error("Connection is closed.")))
        case "silent": {
          const applies = this.silentCalls++ % 2 === 0
          return Effect.sleep(1).pipe(
            Effect.andThen(Effect.sync(() => {
              if (applies && handle.alive) apply()
            })),
            Effect.andThen(Effect.sleep(timeoutMs - 1)),
            Effect.andThen(Effect.fail(failure(RedisTimeout.of(timeoutMs))))
          )
        }
        default: {
          // Applied as it is answered; an answer later than the deadline is its deadline's failure.
          const latency = this.mode === "slow" ? 150 : 1
          if (latency >= timeoutMs) {
            return Effect.sleep(timeoutMs).pipe(Effect.andThen(Effect.fail(failure(RedisTimeout.of(timeoutMs)))))
          }
          return Effect.sleep(latency).pipe(Effect.andThen(Effect.suspend(() => handle.alive ? Effect.succeed(apply()) : Effect.never)))
        }
      }
    })
  }

  /** The writer's Redis, for the process of `handle`. */
  store(handle: Handle): JournalStore {
    return {
      isDown: () => this.mode === "refusing",
      journal: (records: ReadonlyArray<StoredEntry>, deletions: ReadonlyArray<Deletion>, timeoutMs?: number) =>
        this.command(handle, records.length === 0 ? "XDEL" : "XADD", () => {
          const [id, held] = this.script(records.length, records.length === 0 ? "" : encodeRecords(records), deletions)
          return { id: id === "" ? undefined : id, held }
        }, timeoutMs),
      range: (stream, start, end, count) => this.command(handle, "XRANGE", () => this.xrange(stream, start, end, count)),
      deleteV1: (ids) => this.command(handle, "XDEL", () => void ids.forEach((id) => this.xdel("v1", id))),
      lastId: (stream) => this.command(handle, "XREVRANGE", () => this.streams[stream].at(-1)?.id ?? null),
      now: this.command(handle, "TIME", () => Date.now())
    }
  }
}

/**
 * How PostgreSQL answers an INSERT: `up` in 1 ms; `instant` at once (no suspension: a writer
 * fiber then runs many batches in one go); `slow` in 500 ms; `down`: refused, as an unreachable
 * server (the writer retries); `lost`: commits, then the connection drops before the answer.
 */
export type DatabaseMode = "up" | "instant" | "slow" | "down" | "lost"

const connectionError = () =>
  new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: new Error("ECONNREFUSED"), message: "down", operation: "connect" }) })

const refusal = () => {
  const cause = Object.assign(new Error("index row size 3104 exceeds btree version 4 maximum 2704"), { code: "54000" })
  return new SqlError.SqlError({ reason: new SqlError.UnknownError({ cause, message: cause.message, operation: "query" }) })
}

/**
 * `audit_logs` in memory: rows by entry id. A batch holding a record whose `request_id` is in
 * `dies` fails as a defect (a throw in the driver's encoder); one in `refuses` is refused for its
 * content, alone and reduced too.
 */
export class MemoryDatabase {
  readonly rows = new Map<string, StoredEntry>()
  readonly dies = new Set<string>()
  readonly refuses = new Set<string>()
  mode: DatabaseMode = "up"
  /** Called after each commit (a test starts a shutdown from there, between two steps of the writer). */
  afterCommit: () => void = () => {}

  /** The rows of `request_id` (more than one: a record stored twice). */
  rowsOf(requestId: string): number {
    let n = 0
    for (const { entry } of this.rows.values()) if (entry.request_id === requestId) n++
    return n
  }

  insert(handle: Handle, batch: ReadonlyArray<StoredEntry>): Effect.Effect<void, SqlError.SqlError> {
    const commit = Effect.suspend((): Effect.Effect<void, SqlError.SqlError> => {
      if (!handle.alive) return Effect.never
      if (this.mode === "down") return Effect.fail(connectionError())
      if (batch.some((s) => this.dies.has(s.entry.request_id))) return Effect.die(new Error("encoder threw on a record"))
      if (batch.some((s) => this.refuses.has(s.entry.request_id))) return Effect.fail(refusal())
      for (const stored of batch) if (!this.rows.has(stored.entryId)) this.rows.set(stored.entryId, stored)
      this.afterCommit()
      return this.mode === "lost" ? Effect.fail(connectionError()) : Effect.void
    })
    return Effect.suspend(() => {
      if (batch.length === 0) return Effect.void
      switch (this.mode) {
        case "instant":
          return commit
        case "slow":
          return Effect.andThen(Effect.sleep(500), commit)
        default:
          return Effect.andThen(Effect.sleep(1), commit)
      }
    })
  }

  /** The writer's AuditRepo, for the process of `handle`. */
  layer(handle: Handle) {
    return Layer.succeed(AuditRepo, AuditRepo.of({
      insertBatch: (batch) => this.insert(handle, batch),
      page: () => Effect.die("unused"),
      findById: () => Effect.die("unused"),
      statements: { pageRows: () => { throw new Error("unused") }, total: () => { throw new Error("unused") } }
    }))
  }
}
