/**
 * In-memory stand-ins for what the audit journal's writer talks to (src/AuditLogs/JournalStore.ts,
 * docs/audit.md#the-redis-journal), with faults a test switches on: the streams of every layout
 * (the 16 v3 shards, v2, v1) with JOURNAL_LUA's semantics (test/integration/audit.journal.redis.test.ts
 * holds them to a real Redis), a failover to a replica that lagged (`rollback`), and PostgreSQL's
 * `audit_logs` (stored once by entry id, as ON CONFLICT DO NOTHING does). Every call takes virtual
 * time (`Effect.sleep`), so a test on fake timers decides the interleavings. A process's calls go
 * through its own handle: once it is killed (`alive = false`) they never complete and change
 * nothing, as a dead process's calls.
 */
import { Effect, Layer } from "effect"
import { SqlError } from "effect/sql"
import { type CountedStream, encodeRecords, type JournalStream } from "../../src/AuditLogs/Journal.ts"
import { type Deletion, type JournalStore, journalStreams } from "../../src/AuditLogs/JournalStore.ts"
import { AuditRepo } from "../../src/AuditLogs/Repo.ts"
import type { StoredEntry } from "../../src/AuditLogs/Entry.ts"
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
type Id = readonly [number, number]

const parseId = (id: string): [number, number] => {
  const [ms = "0", seq] = id.split("-")
  return [Number(ms), seq === undefined ? Number.NaN : Number(seq)]
}
const compare = ([a, b]: Id, [c, d]: Id) => a !== c ? a - c : b - d

/** Whether `id` is at or after `start` (XRANGE's `-`, `id`, `ms` or `(id`). */
const afterStart = (id: Id, start: string) => {
  if (start === "-") return true
  const exclusive = start.startsWith("(")
  const [ms, seq] = parseId(exclusive ? start.slice(1) : start)
  const c = compare(id, [ms, Number.isNaN(seq) ? 0 : seq])
  return exclusive ? c > 0 : c >= 0
}
/** Whether `id` is at or before `end` (`+`, `id`, or `ms`: every id of that millisecond). */
const beforeEnd = (id: Id, end: string) => {
  if (end === "+") return true
  const [ms, seq] = parseId(end)
  return compare(id, [ms, Number.isNaN(seq) ? Number.MAX_SAFE_INTEGER : seq]) <= 0
}

/** A stream as Redis holds it: its entries, its last id (XADD's `*` issues ids after it), and its record count (v3, v2). */
interface StreamState {
  readonly entries: ReadonlyArray<Entry>
  readonly last: Id
  /** Its count key (undefined: no such key). */
  readonly count: number | undefined
}

const EMPTY: StreamState = { entries: [], last: [0, 0], count: undefined }

/** How many past states of each stream a rollback can go back to. */
const HISTORY = 8

/** The journal's Redis keys in memory: every stream of every layout, with its record count. */
export class MemoryJournal {
  private readonly state = new Map<JournalStream, StreamState>()
  /** Each stream's states before its latest changes, oldest first (a replica that lagged holds one of them). */
  private readonly history = new Map<JournalStream, Array<StreamState>>()
  /** Per stream, the ids its next XADDs issue again (a promoted replica whose clock is behind). */
  private readonly reissue = new Map<JournalStream, Array<string>>()
  mode: RedisMode = "up"
  private silentCalls = 0
  /** Sees every entry as it is deleted, before it goes. */
  onDelete: (stream: JournalStream, entry: Entry) => void = () => {}

  private get(stream: JournalStream): StreamState {
    return this.state.get(stream) ?? EMPTY
  }

  /** Inside a script: its changes are one (a replica receives a script's effects whole, or none of them). */
  private atomic = false

  private set(stream: JournalStream, next: StreamState) {
    if (!this.atomic) this.remember(stream, this.get(stream))
    this.state.set(stream, next)
  }

  private remember(stream: JournalStream, past: StreamState) {
    const states = this.history.get(stream) ?? []
    states.push(past)
    if (states.length > HISTORY) states.shift()
    this.history.set(stream, states)
  }

  /** The entries of a stream now. */
  entries(stream: JournalStream): ReadonlyArray<Entry> {
    return this.get(stream).entries
  }

  /** A stream's count key (undefined: no such key). */
  count(stream: CountedStream): number | undefined {
    return this.get(stream).count
  }

  /** Loses a count key (evicted). */
  loseCount(stream: CountedStream) {
    this.set(stream, { ...this.get(stream), count: undefined })
  }

  xadd(stream: JournalStream, fields: Fields): string {
    const current = this.get(stream)
    const again = this.reissue.get(stream)?.shift()
    const now = Date.now()
    const [ms, seq] = current.last
    const id = again ?? (now > ms ? `${now}-0` : `${ms}-${seq + 1}`)
    this.set(stream, { ...current, entries: [...current.entries, { id, fields }], last: parseId(id) })
    return id
  }

  xdel(stream: JournalStream, id: string): number {
    const current = this.get(stream)
    const found = current.entries.find((e) => e.id === id)
    if (found === undefined) return 0
    this.onDelete(stream, found)
    this.set(stream, { ...current, entries: current.entries.filter((e) => e !== found) })
    return 1
  }

  xrange(stream: JournalStream, start: string, end: string, count: number): Array<[string, Array<string>]> {
    return this.get(stream).entries
      .filter((e) => afterStart(parseId(e.id), start) && beforeEnd(parseId(e.id), end))
      .slice(0, count)
      .map((e) => [e.id, [...e.fields]])
  }

  /** JOURNAL_LUA (src/AuditLogs/Journal.ts), step by step. */
  script(stream: CountedStream, n: number, records: string, batch: string, deletions: ReadonlyArray<Pick<Deletion, "id" | "batch">>): [string, number] {
    const before = this.get(stream)
    this.atomic = true
    try {
      return this.steps(stream, n, records, batch, deletions)
    } finally {
      this.atomic = false
      if (this.get(stream) !== before) this.remember(stream, before)
    }
  }

  private steps(stream: CountedStream, n: number, records: string, batch: string, deletions: ReadonlyArray<Pick<Deletion, "id" | "batch">>): [string, number] {
    let id = ""
    let change = 0
    if (n !== 0) {
      id = this.xadd(stream, ["n", String(n), "b", batch, "r", records])
      change = n
    }
    for (const d of deletions) {
      const found = this.get(stream).entries.find((e) => e.id === d.id)
      if (found === undefined) continue
      const field = (name: string) => {
        const at = found.fields.findIndex((f, i) => i % 2 === 0 && f === name)
        return at < 0 ? undefined : found.fields[at + 1]
      }
      if ((field("b") ?? "") !== d.batch) continue
      this.xdel(stream, d.id)
      const counted = Number(field("n") ?? 0)
      if (counted >= 0 && counted < 1e9 && Number.isInteger(counted)) change -= counted
    }
    const current = this.get(stream)
    if (deletions.length > 0 && current.entries.length === 0) {
      this.set(stream, { ...current, count: undefined })
      return [id, 0]
    }
    const held = Math.max(0, (current.count ?? 0) + change)
    this.set(stream, { ...current, count: held })
    return [id, held]
  }

  /**
   * A failover to a replica that lagged `steps` changes behind on `stream`: the stream is as it was
   * then (the entries appended since are gone, those deleted since are back, its count with them),
   * and the promoted replica's clock is behind, so its next appends get the lost entries' ids again.
   */
  rollback(stream: JournalStream, steps: number) {
    const past = this.history.get(stream) ?? []
    const back = past.length >= steps ? past[past.length - steps]! : EMPTY
    const lost = this.get(stream).entries.filter((e) => compare(parseId(e.id), back.last) > 0).map((e) => e.id)
    this.history.set(stream, past.slice(0, Math.max(0, past.length - steps)))
    this.state.set(stream, back)
    this.reissue.set(stream, lost)
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

  /** The writer's Redis, for the process of `handle`: every layout's streams (as on one server or a Sentinel group). */
  store(handle: Handle): JournalStore {
    return {
      isDown: () => this.mode === "refusing",
      streams: journalStreams(false),
      journal: (stream, append, deletions, timeoutMs) =>
        this.command(handle, append === undefined ? "XDEL" : "XADD", () => {
          const [id, held] = append === undefined
            ? this.script(stream, 0, "", "", deletions)
            : this.script(stream, append.records.length, encodeRecords(append.records), append.batch, deletions)
          return { id: id === "" ? undefined : id, held }
        }, timeoutMs),
      range: (stream, start, end, count, timeoutMs) => this.command(handle, "XRANGE", () => this.xrange(stream, start, end, count), timeoutMs),
      deleteV1: (ids) => this.command(handle, "XDEL", () => void ids.forEach((id) => this.xdel("v1", id))),
      lastId: (stream) => this.command(handle, "XREVRANGE", () => this.get(stream).entries.at(-1)?.id ?? null),
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
