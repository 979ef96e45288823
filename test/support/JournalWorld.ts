/**
 * A world for the audit journal's model tests (test/unit/audit.journal.model.test.ts): one Redis
 * and one PostgreSQL in memory (JournalModel.ts), the writer processes that come and go over them
 * (the real src/AuditLogs/StreamWriter.ts), requests, faults, shutdowns and kills, all on fake
 * timers (the caller installs them) so that a run is one reproducible interleaving. It watches
 * what docs/architecture.md#the-audit-journal says must hold, as it happens, and `check` reports
 * what does not.
 */
import { Effect, Exit, Logger, References, Scope } from "effect"
import { vi } from "vitest"
import type { AuditEntry } from "../../src/AuditLogs/Entry.ts"
import { encodeRecords, type JournalStream, parseJournal } from "../../src/AuditLogs/Journal.ts"
import { journalStreams } from "../../src/AuditLogs/JournalStore.ts"
import { makeJournalWriter } from "../../src/AuditLogs/StreamWriter.ts"
import type { WriterOptions } from "../../src/AuditLogs/WriterOptions.ts"
import { type DatabaseMode, type Handle, MemoryDatabase, MemoryJournal, type RedisMode } from "./JournalModel.ts"

export type Poison = "dies" | "refuses"

/** When a shutdown or a kill comes: `after` ms from now, or (`commits` > 0) right after that many commits. */
export interface When {
  readonly after: number
  readonly commits: number
}

export type Action =
  | { readonly kind: "requests"; readonly n: number; readonly poison: Poison | undefined }
  | { readonly kind: "time"; readonly ms: number }
  | { readonly kind: "redis"; readonly mode: RedisMode }
  | { readonly kind: "database"; readonly mode: DatabaseMode }
  | { readonly kind: "foreign"; readonly stream: JournalStream; readonly records: number; readonly readable: boolean }
  /** A failover to a replica `steps` changes behind on `stream` (every stream: a Sentinel group's primary), its clock behind. */
  | { readonly kind: "rollback"; readonly stream: JournalStream | "all"; readonly steps: number }
  | { readonly kind: "shutdown"; readonly when: When }
  | { readonly kind: "kill"; readonly when: When }

const entry = (requestId: string): AuditEntry => ({
  timestamp: new Date(), user_id: "u", username: "user", user_roles: [], action_type: "GET", resource: "/authors",
  outcome: "success", ip_address: "127.0.0.1", user_agent: "model", request_id: requestId, correlation_id: "c",
  response_status: 200, duration_ms: 1, request_data: {}, error_message: null
})

/** Every stream the writer reads (the model's Redis holds every layout). */
const STREAMS = journalStreams(false)

/** Lets the fake clock run `ms` (0: what is due now), every promise settled in between. */
const pass = (ms: number) => vi.advanceTimersByTimeAsync(ms)

/** Lets the fake clock run, timer by timer, until `done()`; longer than a minute (virtual) is a hang. */
const until = async (done: () => boolean, what: string) => {
  const limit = Date.now() + 60_000
  while (!done()) {
    if (Date.now() > limit) throw new Error(`${what}: still running after a minute`)
    await vi.advanceTimersToNextTimerAsync()
  }
}

const settle = async <A>(effect: Effect.Effect<A>, what: string): Promise<Exit.Exit<A>> => {
  let exit: Exit.Exit<A> | undefined
  Effect.runFork(effect).addObserver((e) => (exit = e))
  await until(() => exit !== undefined, what)
  return exit!
}

interface Process {
  readonly handle: Handle
  readonly scope: Scope.Closeable
  readonly record: (entry: AuditEntry) => Effect.Effect<void>
  /** Whether the writer holds a record (by entry id) in memory. */
  readonly holds: (entryId: string) => boolean
  closing: boolean
}

interface Request {
  readonly id: string
  readonly process: Process
  readonly startedAt: number
  /**
   * Owed an appended record when answered: Redis answered promptly throughout, and since long
   * enough before that no earlier append can still hold the appender (its 2 s deadline), the
   * process was not closing, and no record was counted dropped meanwhile (a full stream).
   */
  journaled: boolean
  answered: boolean
}

export class World {
  readonly journal = new MemoryJournal()
  readonly database = new MemoryDatabase()
  private readonly requests: Array<Request> = []
  private readonly violations: Array<string> = []
  /** Records counted as dropped by live processes, by reason. */
  private readonly dropped = new Map<string, number>()
  /** Entries named by a log line counting them dropped. */
  private readonly logged = new Set<string>()
  /**
   * The entries other writers appended (the stream's own entry, not another one given its id), and
   * what they hold (the request ids of their readable records, or how many records could not be
   * read). `lost`: a failover lost it before any scan read it (their writer, not modelled, held its
   * records).
   */
  private readonly others: Array<{
    readonly entry: { readonly id: string; readonly fields: ReadonlyArray<string> }
    readonly requests: ReadonlyArray<string>
    readonly unreadable: number
    lost: boolean
  }> = []
  /**
   * Requests whose record a crash or a failover may lose (docs/audit.md#guarantees): in neither
   * the streams nor the database when their process was killed (only in its memory), or in an
   * entry a failover lost that the running writer did not hold.
   */
  private readonly lost = new Set<string>()
  private kills = 0
  private rollbacks = 0
  /** Since when Redis has answered promptly (undefined: it does not now). */
  private upSince: number | undefined = Number.NEGATIVE_INFINITY
  private process!: Process
  private next = 0
  private readonly options: WriterOptions

  constructor(options: WriterOptions) {
    this.options = options
    // An entry leaves the stream only once each of its records is stored or counted, and one that
    // cannot be read only once a log line named it.
    this.journal.onDelete = (stream, { fields, id }) => {
      const [read] = parseJournal([[id, [...fields]]])
      for (const { entry: e, entryId } of read?.records ?? []) {
        if (!this.database.rows.has(entryId) && !this.poisoned(e.request_id)) {
          this.violations.push(`${stream} entry ${id} deleted while its record ${e.request_id} is neither stored nor counted`)
        }
      }
      if (read !== undefined && (read.records.length === 0 || read.unreadable > 0) && !this.logged.has(id)) {
        this.violations.push(`${stream} entry ${id}, unreadable, deleted without a log line naming it`)
      }
    }
  }

  private poisoned(requestId: string) {
    return this.database.dies.has(requestId) || this.database.refuses.has(requestId)
  }

  /** Every request id in the streams, read as a recovery scan reads them. */
  private journaled(): Set<string> {
    const ids = new Set<string>()
    for (const stream of STREAMS) {
      for (const e of parseJournal(this.journal.xrange(stream, "-", "+", Number.MAX_SAFE_INTEGER))) {
        for (const r of e.records) ids.add(r.entry.request_id)
      }
    }
    return ids
  }

  private durable(requestId: string, journaled = this.journaled()) {
    return journaled.has(requestId) || this.database.rowsOf(requestId) > 0
  }

  /** What a process logs: the records it counts as dropped, by reason (a killed one's go nowhere). */
  private logger(handle: Handle) {
    return Logger.layer([Logger.make(({ fiber }) => {
      if (!handle.alive) return
      const { dropped, entry: entryId, reason } = fiber.getRef(References.CurrentLogAnnotations)
      if (typeof reason !== "string" || typeof dropped !== "number") return
      this.dropped.set(reason, (this.dropped.get(reason) ?? 0) + dropped)
      if (typeof entryId === "string") this.logged.add(entryId)
      if (reason === "stream_full" && this.journal.mode === "refusing") {
        this.violations.push(`${dropped} record(s) counted stream_full while Redis is unreachable`)
      }
      for (const r of this.requests) if (!r.answered) r.journaled = false
    })])
  }

  private async start() {
    const handle: Handle = { alive: true }
    const scope = Effect.runSync(Scope.make())
    const logger = this.logger(handle)
    const started = await settle(
      makeJournalWriter(this.journal.store(handle), this.options).pipe(
        Scope.provide(scope),
        Effect.provide(this.database.layer(handle)),
        Effect.provide(logger)
      ),
      "start"
    )
    if (Exit.isFailure(started)) throw new Error(`the writer did not start: ${String(started.cause)}`)
    const writer = started.value
    this.process = { handle, scope, closing: false, record: (e) => writer.record(e).pipe(Effect.provide(logger)), holds: writer.holds }
  }

  private request(poison: Poison | undefined) {
    const id = `r${this.next++}`
    if (poison !== undefined) this.database[poison].add(id)
    const process = this.process
    const request: Request = {
      id,
      process,
      startedAt: Date.now(),
      journaled: this.upSince !== undefined && Date.now() - this.upSince > 2000 && !process.closing,
      answered: false
    }
    this.requests.push(request)
    Effect.runFork(process.record(entry(id))).addObserver(() => {
      if (!process.handle.alive) return // its process was killed first: never answered
      request.answered = true
      const waited = Date.now() - request.startedAt
      if (waited > 100) this.violations.push(`${id} waited ${waited} ms for its record`)
      if (request.journaled && !this.durable(id)) this.violations.push(`${id} answered with Redis up, its record neither in the stream nor stored`)
    })
  }

  private setRedis(mode: RedisMode) {
    if (mode !== "up") {
      this.upSince = undefined
      for (const r of this.requests) if (!r.answered) r.journaled = false
    } else if (this.journal.mode !== "up") this.upSince = Date.now()
    this.journal.mode = mode
  }

  /** Another writer's entry, v1 (one record), v2 or v3 (a batch id of its own), readable or not. */
  private foreignEntry(stream: JournalStream, records: number, readable: boolean) {
    const n = stream === "v1" ? 1 : records
    const stored = Array.from({ length: n }, () => ({ entryId: crypto.randomUUID(), entry: entry(`f${this.next++}`) }))
    let id: string
    if (stream !== "v1") {
      const batch = stream === "v2" ? "" : `foreign-${this.next++}`
      ;[id] = this.journal.script(stream, n, readable ? encodeRecords(stored) : "[{\"entry_id\":", batch, [])
    } else {
      const { entry: e, entryId } = stored[0]!
      id = this.journal.xadd("v1", ["id", entryId, "e", readable ? JSON.stringify({ ...e, timestamp: e.timestamp.toISOString() }) : "{"])
    }
    this.others.push({
      entry: this.journal.entries(stream).find((e) => e.id === id)!,
      requests: readable ? stored.map((s) => s.entry.request_id) : [],
      unreadable: readable ? 0 : n,
      lost: false
    })
  }

  /**
   * A failover to a replica that lagged, on `streams`. Of the entries it loses, the records the
   * running writer holds in memory must still be stored; the others are lost (their writer gone —
   * killed, or stopped leaving them for the next instance — or past its memory bound), and other
   * writers' entries are theirs to write.
   */
  private rollback(streams: ReadonlyArray<JournalStream>, steps: number) {
    this.rollbacks++
    const entries = () => new Set(STREAMS.flatMap((stream) => this.journal.entries(stream)))
    const before = entries()
    for (const stream of streams) this.journal.rollback(stream, steps)
    const after = entries()
    for (const other of this.others) if (before.has(other.entry) && !after.has(other.entry)) other.lost = true
    for (const { fields, id } of [...before].filter((e) => !after.has(e))) {
      for (const { entry: e, entryId } of parseJournal([[id, [...fields]]])[0]?.records ?? []) {
        if (!this.process.holds(entryId) && this.database.rowsOf(e.request_id) === 0) this.lost.add(e.request_id)
      }
    }
  }

  /** Runs `then` at `when` (right inside the commit: between two steps of the writer); resolves once it ran. */
  private async at(when: When, then: () => void) {
    let done = false
    const run = () => {
      if (done) return
      done = true
      this.database.afterCommit = () => {}
      then()
    }
    let commits = when.commits
    if (commits > 0) this.database.afterCommit = () => void (--commits === 0 && run())
    // No commit comes within 5 s: then anyway.
    setTimeout(run, when.commits > 0 ? 5_000 : when.after)
    await until(() => done, "waiting for the moment")
  }

  /** SIGTERM: the scope closes (the writer's finalizer flushes), the process exits. */
  private async stop(when: When = { after: 0, commits: 0 }) {
    const process = this.process
    let exit: Exit.Exit<void> | undefined
    await this.at(when, () => {
      process.closing = true
      // Requests still waiting go on at once, their records in the in-process buffer.
      for (const r of this.requests) if (!r.answered) r.journaled = false
      Effect.runFork(Scope.close(process.scope, Exit.void)).addObserver((e) => (exit = e))
    })
    await until(() => exit !== undefined, "shutdown")
    if (Exit.isFailure(exit!)) this.violations.push(`shutdown failed: ${String(exit.cause)}`)
    process.handle.alive = false
  }

  /** kill -9: nothing more from the process reaches Redis or PostgreSQL; what only it held is gone. */
  private async kill(when: When) {
    const { handle, scope } = this.process
    await this.at(when, () => {
      this.kills++
      const journaled = this.journaled()
      for (const r of this.requests) {
        if (r.process.handle === handle && r.answered && !this.durable(r.id, journaled)) this.lost.add(r.id)
      }
      handle.alive = false
    })
    // Its calls never complete; its fibers end with the scope (each wait has a deadline).
    Effect.runFork(Scope.close(scope, Exit.void))
  }

  /** The actions, then everything back: the last process catches up and stops; the next one's start scan finds what is left. */
  async run(actions: ReadonlyArray<Action>) {
    await this.start()
    for (const a of actions) {
      if (a.kind === "requests") {
        for (let i = 0; i < a.n; i++) this.request(i === 0 ? a.poison : undefined)
        await pass(0)
      } else if (a.kind === "time") await pass(a.ms)
      else if (a.kind === "redis") this.setRedis(a.mode)
      else if (a.kind === "database") this.database.mode = a.mode
      else if (a.kind === "foreign") this.foreignEntry(a.stream, a.records, a.readable)
      else if (a.kind === "rollback") this.rollback(a.stream === "all" ? STREAMS : [a.stream], a.steps)
      else {
        await (a.kind === "shutdown" ? this.stop(a.when) : this.kill(a.when))
        await this.start()
      }
    }
    this.setRedis("up")
    this.database.mode = "up"
    await pass(40_000)
    await this.stop()
    await this.start()
    await pass(2_000)
    await this.stop()
  }

  /** What does not hold (nothing: every invariant held). */
  check(): Array<string> {
    const problems = [...this.violations]
    let missing = 0
    for (const r of this.requests) {
      if (!r.answered) continue
      const rows = this.database.rowsOf(r.id)
      if (rows > 1) problems.push(`${r.id} stored ${rows} times`)
      if (rows === 0 && !this.lost.has(r.id)) missing++
    }
    const counted = ["buffer_full", "stream_full", "shutdown", "refused"].reduce((n, reason) => n + (this.dropped.get(reason) ?? 0), 0)
    if (missing > counted) problems.push(`${missing} answered request(s) without a record, ${counted} counted as dropped`)
    const others = this.others.filter((o) => !o.lost)
    for (const id of others.flatMap((o) => o.requests)) {
      if (this.database.rowsOf(id) !== 1) problems.push(`another writer's record ${id} stored ${this.database.rowsOf(id)} times`)
    }
    // Counted before deletion, so a kill in between may count an entry twice, and so may a rollback
    // that brings back an entry deleted already; never fewer.
    const unreadable = this.dropped.get("unreadable") ?? 0
    const appended = others.reduce((n, o) => n + o.unreadable, 0)
    if (unreadable < appended || (this.kills + this.rollbacks === 0 && unreadable !== appended)) {
      problems.push(`${appended} unreadable record(s) appended, ${unreadable} counted`)
    }
    const left = STREAMS.reduce((n, stream) => n + this.journal.entries(stream).length, 0)
    if (left > 0) problems.push(`${left} entries left in the streams`)
    return problems
  }
}
