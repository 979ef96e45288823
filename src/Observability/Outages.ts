/**
 * Outages of the service's dependencies — the database, Redis, the identity provider — as the log
 * tells them (docs/operations.md#outages): one WARN line when an outage begins (the first
 * operation that failed because of the dependency, with the dependency's own reply in `cause`) and
 * one INFO line when it ends (how long it lasted, how many operations failed meanwhile); never a
 * line per failed request.
 *
 * The places that see a dependency fail report it here (`failed`): the HTTP error response and the
 * WebSocket packages for the database, the Redis command wrapper and the rate limiter for Redis,
 * the key fetch and the token endpoint for the identity provider. What ends an outage is the
 * dependency answering again (`recovered`): a successful call, or the dependency's recovery check
 * (`watch`: the same check `/health` runs), which runs every second while an outage lasts — so an
 * outage ends in the log even when no request comes to find out.
 *
 * A `Context.Reference`: the app provides one per instance (`Outages.layer`, App.ts); elsewhere
 * (a unit test of one module, `npm run migrate`) reports go nowhere.
 */
import { Context, Effect, Exit, Layer, Schedule } from "effect"
import { detached } from "../Db/Deadline.ts"

export type Dependency = "database" | "redis" | "identity"

/** A check of the dependency: succeeds when it answers again. */
export type RecoveryCheck = Effect.Effect<void, unknown>

export interface OutagesShape {
  /**
   * `operation` failed because `dependency` did (`cause`: its reply; `consequence`: what the
   * service does about it, for the line). The first failure of an outage logs the WARN line; the
   * others are counted. One error reported twice (by the command that failed and by its caller)
   * counts once.
   */
  readonly failed: (dependency: Dependency, cause: unknown, operation?: string, consequence?: string) => Effect.Effect<void>
  /** `dependency` answered: an outage of it ends, with the INFO line. */
  readonly recovered: (dependency: Dependency) => Effect.Effect<void>
  /**
   * How an outage of `dependency` is found to be over (run every second while one lasts, bounded
   * by 1 s), and what its lines call it (`the identity provider https://…`).
   */
  readonly watch: (dependency: Dependency, check: RecoveryCheck, label?: string) => Effect.Effect<void>
  /** Whether an outage of `dependency` is under way (what the recovery loop and tests read). */
  readonly ongoing: (dependency: Dependency) => boolean
}

interface Outage {
  readonly began: number
  failed: number
}

const LABELS: Record<Dependency, string> = { database: "the database", redis: "Redis", identity: "the identity provider" }

/** The recovery checks' period and bound, as /health's (docs/operations.md#health-and-probes). */
const CHECK_EVERY_MS = 1000
const CHECK_TIMEOUT_MS = 1000

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`

/** The tracker's state and its two lines; `failed`/`recovered` run in the caller's fiber (its log annotations). */
export const makeOutages = (now: () => number = Date.now) => {
  const outages = new Map<Dependency, Outage>()
  const checks = new Map<Dependency, RecoveryCheck>()
  const labels = new Map<Dependency, string>(Object.entries(LABELS) as Array<[Dependency, string]>)
  /** Errors already counted (reported by a command and again by its caller). */
  const counted = new WeakSet<object>()

  const failed = (dependency: Dependency, cause: unknown, operation?: string, consequence?: string): Effect.Effect<void> =>
    Effect.suspend(() => {
      if (typeof cause === "object" && cause !== null) {
        if (counted.has(cause)) return Effect.void
        counted.add(cause)
      }
      const outage = outages.get(dependency)
      if (outage !== undefined) {
        outage.failed++
        return Effect.void
      }
      outages.set(dependency, { began: now(), failed: 1 })
      const label = labels.get(dependency)!
      const what = [operation === undefined ? undefined : `${operation} failed`, consequence].filter((x) => x !== undefined)
      return Effect.logWarning(`Outage began: ${label}${what.length === 0 ? "" : ` (${what.join("; ")})`}`, cause).pipe(
        Effect.annotateLogs({ dependency, ...(operation === undefined ? {} : { operation }) })
      )
    })

  const recovered = (dependency: Dependency): Effect.Effect<void> =>
    Effect.suspend(() => {
      const outage = outages.get(dependency)
      if (outage === undefined) return Effect.void
      outages.delete(dependency)
      const ms = Math.max(0, now() - outage.began)
      return Effect.logInfo(
        `Outage ended: ${labels.get(dependency)!} answers again after ${(ms / 1000).toFixed(1)} s; ` +
          `${plural(outage.failed, "operation")} failed meanwhile`
      ).pipe(Effect.annotateLogs({ dependency, duration_ms: ms, failed: outage.failed }))
    })

  const watch = (dependency: Dependency, check: RecoveryCheck, label?: string) =>
    Effect.sync(() => {
      checks.set(dependency, check)
      if (label !== undefined) labels.set(dependency, label)
    })

  /** One pass: each dependency in an outage is checked (in parallel, each bounded); one that answers ends its outage. */
  const checkOngoing = Effect.suspend(() =>
    Effect.forEach([...outages.keys()], (dependency) => {
      const check = checks.get(dependency)
      if (check === undefined) return Effect.void
      return Effect.exit(detached(check, CHECK_TIMEOUT_MS, Effect.void, () => "timeout" as const)).pipe(
        Effect.flatMap((exit) => (Exit.isSuccess(exit) ? recovered(dependency) : Effect.void))
      )
    }, { concurrency: "unbounded", discard: true })
  )

  const shape: OutagesShape = { failed, recovered, watch, ongoing: (dependency) => outages.has(dependency) }
  return { shape, checkOngoing }
}

/** Reports that go nowhere: a module run outside the app. */
const unwatched: OutagesShape = {
  failed: () => Effect.void,
  recovered: () => Effect.void,
  watch: () => Effect.void,
  ongoing: () => false
}

export const Outages = Context.Reference<OutagesShape>("Observability/Outages", { defaultValue: () => unwatched })

/** This instance's tracker, with its recovery loop on a scoped fiber (App.ts provides it under everything). */
export const layerOutages: Layer.Layer<never> = Layer.effectContext(Effect.gen(function*() {
  const { shape, checkOngoing } = makeOutages()
  yield* Effect.forkScoped(Effect.repeat(checkOngoing, Schedule.spaced(CHECK_EVERY_MS)))
  return Context.make(Outages, shape)
}))
