/**
 * The embedded database's directory lock (src/Db/DataDirLock.ts, docs/operations.md#the-embedded-database):
 * one owner at a time, refused with the owner's pid, stale locks taken over, only its own lock
 * removed at release.
 */
import { Effect, Exit, Scope } from "effect"
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { EmbeddedDatabaseInUse, lockDataDir, processStart } from "../../src/Db/DataDirLock.ts"

const dirs: Array<string> = []
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

const fresh = () => {
  const root = mkdtempSync(join(tmpdir(), "ads-lock-"))
  dirs.push(root)
  return join(root, "pgdata")
}

/** Takes the lock in a scope of its own: the exit, and how to close the scope. */
const take = async (dir: string) => {
  const scope = Effect.runSync(Scope.make())
  const exit = await Effect.runPromiseExit(Scope.provide(lockDataDir(dir), scope))
  return { exit, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

const owner = (dir: string) => JSON.parse(readFileSync(`${dir}.lock`, "utf8")) as { pid: number; started?: string }

/** The pid of a process that has exited. */
const deadPid = () => spawnSync(process.execPath, ["-e", ""]).pid!

describe("the embedded database's directory lock", () => {
  it("is taken with this process's pid and start, refused to a second taker naming it, and removed at release", async () => {
    const dir = fresh()
    const first = await take(dir)
    expect(Exit.isSuccess(first.exit)).toBe(true)
    expect(owner(dir)).toEqual({ pid: process.pid, started: processStart(process.pid) })

    const second = await take(dir)
    expect(second.exit).toEqual(Exit.fail(EmbeddedDatabaseInUse.of(dir, process.pid)))
    expect(Exit.isFailure(second.exit) && String(second.exit.cause)).toContain(`the embedded database in ${dir} is in use by process ${process.pid}`)
    await second.close()
    expect(existsSync(`${dir}.lock`)).toBe(true)

    await first.close()
    expect(existsSync(`${dir}.lock`)).toBe(false)
  })

  it.each([
    ["the pid of a process that has exited", () => JSON.stringify({ pid: deadPid() })],
    ["this process's pid with another start (a pid reused after a restart)", () => JSON.stringify({ pid: process.pid, started: "1" })],
    ["an empty file (its writer killed while writing it)", () => ""],
    ["something else", () => "not a lock\n"]
  ])("a stale lock — %s — is taken over", async (_name, content) => {
    const dir = fresh()
    writeFileSync(`${dir}.lock`, content())
    const lock = await take(dir)
    expect(Exit.isSuccess(lock.exit)).toBe(true)
    expect(owner(dir).pid).toBe(process.pid)
    await lock.close()
    expect(existsSync(`${dir}.lock`)).toBe(false)
  })

  it("a lock that another process took over meanwhile is left in place at release", async () => {
    const dir = fresh()
    const lock = await take(dir)
    const other = { pid: process.ppid, started: processStart(process.ppid) }
    writeFileSync(`${dir}.lock`, JSON.stringify(other))
    await lock.close()
    expect(owner(dir)).toEqual(other)
  })
})
