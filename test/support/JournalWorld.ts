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
import { encodeRecords, parseJournal } from "../../src/AuditLogs/Journal.ts"
import type { JournalStream } from "../../src/AuditLogs/JournalStore.ts"
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
  | { readonly kind: "shutdown"; readonly when: When }
  | { readonly kind: "kill"; readonly when: When }

const entry = (requestId: string): AuditEntry => ({
  timestamp: new Date(), user_id: "u", username: "user", user_roles: [], action_type: "GET", resource: "/authors",
  outcome: "success", ip_address: "127.0.0.1", user_agent: "model", request_id: requestId, correlation_id: "c",
  response_status: 200, duration_ms: 1, request_data: {}, error_message: null
})

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
  /** Records of readable entries other writers appended. */
  private readonly foreign: Array<string> = []
  private unreadable = 0
  /** Answered requests whose record was in neither the stream nor the database when their process was killed. */
  private readonly lostInCrash = new Set<string>()
  private kills = 0
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
    for (const stream of ["v1", "v2"] as const) {
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
    this.process = { handle, scope, closing: false, record: (e) => writer.record(e).pipe(Effect.provide(logger)) }
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

  /** Another writer's entry, v1 (one record) or v2, readable or not. */
  private foreignEntry(stream: JournalStream, records: number, readable: boolean) {
    const n = stream === "v1" ? 1 : records
    const stored = Array.from({ length: n }, () => ({ entryId: crypto.randomUUID(), entry: entry(`f${this.next++}`) }))
    if (readable) this.foreign.push(...stored.map((s) => s.entry.request_id))
    else this.unreadable += n
    if (stream === "v2") this.journal.script(n, readable ? encodeRecords(stored) : "[{\"entry_id\":", [])
    else {
      const { entry: e, entryId } = stored[0]!
      this.journal.xadd("v1", ["id", entryId, "e", readable ? JSON.stringify({ ...e, timestamp: e.timestamp.toISOString() }) : "{"])
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
        if (r.process.handle === handle && r.answered && !this.durable(r.id, journaled)) this.lostInCrash.add(r.id)
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
      if (rows === 0 && !this.lostInCrash.has(r.id)) missing++
    }
    const counted = ["buffer_full", "stream_full", "shutdown", "refused"].reduce((n, reason) => n + (this.dropped.get(reason) ?? 0), 0)
    if (missing > counted) problems.push(`${missing} answered request(s) without a record, ${counted} counted as dropped`)
    for (const id of this.foreign) {
      if (this.database.rowsOf(id) !== 1) problems.push(`another writer's record ${id} stored ${this.database.rowsOf(id)} times`)
    }
    // Counted before deletion, so a kill in between may count an entry twice; never fewer.
    const unreadable = this.dropped.get("unreadable") ?? 0
    if (unreadable < this.unreadable || (this.kills === 0 && unreadable !== this.unreadable)) {
      problems.push(`${this.unreadable} unreadable record(s) appended, ${unreadable} counted`)
    }
    const left = this.journal.streams.v1.length + this.journal.streams.v2.length
    if (left > 0) problems.push(`${left} entries left in the stream`)
    return problems
  }
}
