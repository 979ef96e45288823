/**
 * A private PostgreSQL cluster for fault tests: `initdb` into a temporary directory, `pg_ctl`
 * start/stop on a free loopback port, so a test can stop the server (`-m fast`: sessions ended,
 * open transactions rolled back; `-m immediate`: a crash, WAL replay at the next start) and start
 * it again without touching the shared server other tests use. The binaries come from `PATH` or
 * /usr/lib/postgresql/<version>/bin. PostgreSQL refuses to run as root: when the tests run as root,
 * every command runs as the `postgres` OS user (`runuser -u postgres --`), which owns the directory.
 *
 * `postgresServerUnavailable()` says why a cluster cannot be made here (no initdb, no runuser or
 * `postgres` user while root), so a test can fall back to what it can do and say so.
 */
import { execFile, spawnSync } from "node:child_process"
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "./Ports.ts"

export interface PostgresServer {
  readonly port: number
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication on loopback). */
  readonly url: string
  /** `pg_ctl stop -m <mode>`; resolves once the server is down. */
  readonly stop: (mode?: "fast" | "immediate" | "smart") => Promise<void>
  /** `pg_ctl start`; resolves once it accepts connections. */
  readonly start: () => Promise<void>
  readonly running: () => boolean
  /** Stops the server (immediate) and removes its directory. */
  readonly destroy: () => Promise<void>
}

const binDir = (): string | undefined => {
  const onPath = spawnSync("sh", ["-c", "command -v initdb"], { encoding: "utf8" }).stdout.trim()
  if (onPath !== "") return join(onPath, "..")
  const root = "/usr/lib/postgresql"
  if (!existsSync(root)) return undefined
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, "bin", "initdb"))).sort((a, b) => Number(b) - Number(a))
  return versions[0] === undefined ? undefined : join(root, versions[0], "bin")
}

const isRoot = () => process.getuid?.() === 0

const postgresUser = (): { uid: number; gid: number } | undefined => {
  const result = spawnSync("id", ["-u", "postgres"], { encoding: "utf8" })
  const gid = spawnSync("id", ["-g", "postgres"], { encoding: "utf8" })
  if (result.status !== 0 || gid.status !== 0) return undefined
  return { uid: Number(result.stdout.trim()), gid: Number(gid.stdout.trim()) }
}

/** Why no private cluster can be made here, or undefined when one can. */
export const postgresServerUnavailable = (): string | undefined => {
  const bin = binDir()
  if (bin === undefined || !existsSync(join(bin, "pg_ctl"))) return "no initdb/pg_ctl (PATH or /usr/lib/postgresql/*/bin)"
  if (!isRoot()) return undefined
  if (spawnSync("sh", ["-c", "command -v runuser"]).status !== 0) return "running as root without runuser"
  if (postgresUser() === undefined) return "running as root without a postgres OS user"
  return undefined
}

export const startPostgresServer = async (): Promise<PostgresServer> => {
  const why = postgresServerUnavailable()
  if (why !== undefined) throw new Error(`no private PostgreSQL cluster: ${why}`)
  const bin = binDir()!
  const dir = mkdtempSync(join(tmpdir(), "ads-pg-"))
  const data = join(dir, "data")
  const log = join(dir, "server.log")
  const user = isRoot() ? postgresUser() : undefined
  if (user !== undefined) chownSync(dir, user.uid, user.gid)
  // Asynchronous, so the test's own load and probes keep running while the server stops or starts.
  const run = (program: string, args: ReadonlyArray<string>) =>
    new Promise<void>((resolve, reject) => {
      const [command, argv] = user === undefined
        ? [join(bin, program), [...args]]
        : ["runuser", ["-u", "postgres", "--", join(bin, program), ...args]]
      execFile(command, argv, { timeout: 60_000, cwd: dir }, (error, stdout, stderr) => {
        if (error === null) return resolve()
        const output = existsSync(log) ? readFileSync(log, "utf8").slice(-2000) : ""
        reject(new Error(`${program} ${args.join(" ")} failed: ${String(error)}\n${stdout}${stderr}\n${output}`))
      })
    })
  await run("initdb", ["-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"])
  const port = await freePort()
  let up = false
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=50`
  const start = async () => {
    await run("pg_ctl", ["-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"])
    up = true
  }
  const stop = async (mode: "fast" | "immediate" | "smart" = "fast") => {
    await run("pg_ctl", ["-D", data, "-m", mode, "-w", "-t", "60", "stop"])
    up = false
  }
  await start()
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop,
    start,
    running: () => up,
    destroy: async () => {
      if (up) await stop("immediate").catch(() => undefined)
      rmSync(dir, { recursive: true, force: true })
    }
  }
}
