/**
 * One process at a time on an embedded database's directory (docs/operations.md#the-embedded-database):
 * PGlite is PostgreSQL in a single process, with nothing to stop a second process from opening the
 * same files — `npm run migrate` beside a running `npm start` would. The owner holds a lock file
 * beside the directory (`<dir>.lock`), created atomically (`open` with `wx`), naming its process;
 * another process is refused, saying which one holds it. A lock whose process is gone (killed,
 * crashed) is taken over. The lock is released when its scope closes, or at the latest when the
 * process exits.
 */
import { Data, Effect, type Scope } from "effect"
import { closeSync, linkSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from "node:fs"

/** Another live process holds the embedded database. */
export class EmbeddedDatabaseInUse extends Data.TaggedError("EmbeddedDatabaseInUse")<{
  readonly dir: string
  readonly pid: number
  readonly message: string
}> {
  static readonly of = (dir: string, pid: number) =>
    new EmbeddedDatabaseInUse({ dir, pid, message: `the embedded database in ${dir} is in use by process ${pid}` })
}

/** What a lock file says: its process and when that process started (so a reused pid is not mistaken for it). */
interface Owner {
  readonly pid: number
  readonly started: string | undefined
}

/**
 * When a process started, in clock ticks since boot (Linux `/proc/<pid>/stat`, field 22), or
 * undefined where there is no `/proc` or no such process.
 */
export const processStart = (pid: number): string | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]
  } catch {
    return undefined
  }
}

const alive = (owner: Owner): boolean => {
  try {
    process.kill(owner.pid, 0)
  } catch (error) {
    // EPERM: it exists, under another user.
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false
  }
  if (owner.started === undefined) return true
  const started = processStart(owner.pid)
  return started === undefined || started === owner.started
}

const readOwner = (path: string): Owner | undefined => {
  try {
    const parsed: unknown = JSON.parse(readFileSync(path, "utf8"))
    if (typeof parsed !== "object" || parsed === null || !("pid" in parsed) || !Number.isSafeInteger(parsed.pid)) return undefined
    const started = "started" in parsed && typeof parsed.started === "string" ? parsed.started : undefined
    return { pid: parsed.pid as number, started }
  } catch {
    // Gone, unreadable or not ours (a half-written file of a process killed while writing it): stale.
    return undefined
  }
}

const same = (a: Owner | undefined, b: Owner | undefined) => a?.pid === b?.pid && a?.started === b?.started

const ATTEMPTS = 5

/**
 * Takes the lock of `dir` for this process: returns how to release it, or fails with
 * `EmbeddedDatabaseInUse` naming the live process that holds it.
 */
const take = (dir: string): (() => void) => {
  const path = `${dir}.lock`
  const me: Owner = { pid: process.pid, started: processStart(process.pid) }
  const content = `${JSON.stringify(me)}\n`
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    try {
      const fd = openSync(path, "wx", 0o644)
      try {
        writeSync(fd, content)
      } finally {
        closeSync(fd)
      }
      let held = true
      const release = () => {
        if (!held) return
        held = false
        process.off("exit", release)
        // Only our own lock: never one another process took over meanwhile.
        if (same(readOwner(path), me)) unlinkSync(path)
      }
      process.on("exit", release)
      return release
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
    }
    const owner = readOwner(path)
    // This very process included: a second open of the same directory is refused too.
    if (owner !== undefined && alive(owner)) throw EmbeddedDatabaseInUse.of(dir, owner.pid)
    // Stale: moved aside (atomic: of several processes taking it over, one moves this file), then
    // created afresh. A process that moved a lock other than the stale one it read (another has
    // just taken it over) puts it back and looks again.
    const aside = `${path}.${process.pid}`
    try {
      renameSync(path, aside)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") continue
      throw error
    }
    if (!same(readOwner(aside), owner)) {
      try {
        linkSync(aside, path)
      } catch {
        // Another lock is there already: it stays, and the next attempt reads it.
      }
    }
    unlinkSync(aside)
  }
  throw new Error(`the lock of the embedded database in ${dir} (${path}) changed hands ${ATTEMPTS} times while it was being taken`)
}

/** The lock of an embedded database's directory for the scope (see the module's comment). */
export const lockDataDir = (dir: string): Effect.Effect<void, EmbeddedDatabaseInUse, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      try {
        return Effect.succeed(take(dir))
      } catch (error) {
        return error instanceof EmbeddedDatabaseInUse ? Effect.fail(error) : Effect.die(error)
      }
    }),
    (release) => Effect.sync(release)
  ).pipe(Effect.asVoid)
