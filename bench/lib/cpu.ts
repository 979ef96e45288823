/**
 * CPU time of the processes a server under load makes work, read around each round:
 * - PostgreSQL: every process of the cluster — the postmaster and its children (backends, WAL
 *   writer, checkpointer, autovacuum …), from /proc/<pid>/stat (readable though they run as
 *   another user). Children that exit during a round are not lost: the kernel adds their time to
 *   the postmaster's cutime/cstime when it reaps them. Also, separately, the backends connected to
 *   one bench database (named in their process title), which other clients of the same cluster
 *   (a test suite on another database) do not touch; they are polled during the round, so one
 *   that exits loses at most the last poll interval of its time.
 * - Redis: `INFO cpu` (used_cpu_user + used_cpu_sys, the whole server).
 * Rounds alternate servers and only one is under load at a time, so a round's delta divided by
 * its answered requests is that server's cost per request there.
 */
import { Redis } from "ioredis"
import { readdirSync, readFileSync } from "node:fs"
import { withClient } from "./databases.ts"

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100

interface Stat { readonly ppid: number; readonly ticks: number; readonly childTicks: number }

const readStat = (pid: number): Stat | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    // After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    return { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]), childTicks: Number(f[13]) + Number(f[14]) }
  } catch {
    return undefined
  }
}

const title = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ")
  } catch {
    return ""
  }
}

export interface PgSample {
  /** Postmaster (own and reaped children's time) + every live child, in ticks. */
  readonly cluster: number
  /** Ticks of each backend connected to each watched database, by pid. */
  readonly backends: ReadonlyMap<string, ReadonlyMap<number, number>>
}

export interface PgCpu {
  readonly postmaster: number
  readonly sample: () => PgSample | undefined
  /**
   * Follows one database's backends until the returned function is called, which gives the last
   * ticks seen of each (by pid). Polled every `intervalMs`, so a backend that exits during the
   * round (a pool letting a connection go) loses at most that much of its time.
   */
  readonly watch: (database: string, intervalMs?: number) => () => ReadonlyMap<number, number>
}

/** Finds the cluster behind `adminUrl` (its postmaster is the parent of our own backend); undefined when /proc does not show it (a remote server). */
export const pgCpu = async (adminUrl: string, databases: ReadonlyArray<string>): Promise<PgCpu | undefined> => {
  // Read while our backend is alive (it exits when the client ends).
  const postmaster = await withClient(adminUrl, async (c) => readStat((await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid)?.ppid)
  if (postmaster === undefined || readStat(postmaster) === undefined) return undefined
  /** Each pid seen in /proc: the watched database it is a backend of, "" for another child of the postmaster, undefined for no child. */
  const known = new Map<number, string | undefined>()
  const children = () => {
    const live = new Set<number>()
    for (const entry of readdirSync("/proc")) {
      const pid = Number(entry)
      if (!Number.isInteger(pid)) continue
      live.add(pid)
      const was = known.get(pid)
      if (was === "") {
        // Another child: look again (a backend just forked may not show its database yet).
        const name = title(pid)
        known.set(pid, databases.find((d) => name.includes(` ${d} `)) ?? "")
        continue
      }
      if (known.has(pid)) continue
      const s = readStat(pid)
      if (s === undefined || s.ppid !== postmaster) {
        known.set(pid, undefined)
        continue
      }
      const name = title(pid)
      known.set(pid, databases.find((d) => name.includes(` ${d} `)) ?? "")
    }
    for (const pid of known.keys()) if (!live.has(pid)) known.delete(pid) // gone: the pid may be reused
    return [...known].filter((e): e is [number, string] => e[1] !== undefined)
  }
  const sample = (): PgSample | undefined => {
    const root = readStat(postmaster)
    if (root === undefined) return undefined
    let cluster = root.ticks + root.childTicks
    const backends = new Map(databases.map((d) => [d, new Map<number, number>()]))
    for (const [pid, database] of children()) {
      const s = readStat(pid)
      if (s === undefined) continue
      cluster += s.ticks
      if (database !== "") backends.get(database)!.set(pid, s.ticks)
    }
    return { cluster, backends }
  }
  const watch = (database: string, intervalMs = 250) => {
    const seen = new Map<number, number>()
    const poll = () => {
      for (const [pid, d] of children()) {
        if (d !== database) continue
        const s = readStat(pid)
        if (s !== undefined) seen.set(pid, s.ticks)
      }
    }
    const timer = setInterval(poll, intervalMs)
    return () => {
      clearInterval(timer)
      poll()
      return seen
    }
  }
  return { postmaster, sample, watch }
}

/** µs of CPU per request over a round: the whole cluster (two samples), and one database's backends (its watch against the first sample). */
export const pgDelta = (before: PgSample | undefined, after: PgSample | undefined, database: string | undefined, watched: ReadonlyMap<number, number> | undefined, requests: number) => {
  if (before === undefined || after === undefined || requests <= 0) return { cluster: undefined, backends: undefined }
  const us = (ticks: number) => (ticks * 1_000_000) / TICKS_PER_SECOND / requests
  let own: number | undefined
  if (database !== undefined && watched !== undefined) {
    const was = before.backends.get(database)
    own = 0
    for (const [pid, ticks] of watched) own += ticks - (was?.get(pid) ?? 0)
  }
  return { cluster: us(after.cluster - before.cluster), backends: own === undefined ? undefined : us(own) }
}

export interface RedisCpu {
  /** Seconds of CPU Redis has used (user + system), or undefined when it cannot be read. */
  readonly sample: () => Promise<number | undefined>
  readonly close: () => void
}

/** The CPU of the Redis servers at `urls` together (a cluster's nodes: each `redis://host:port`). */
export const redisCpu = (urls: ReadonlyArray<string>): RedisCpu => {
  const clients = urls.map((url) => {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, commandTimeout: 2000 })
    client.on("error", () => {})
    return client
  })
  const secondsOf = async (client: Redis) => {
    const info = await client.info("cpu")
    const value = (key: string) => Number(new RegExp(`^${key}:([\\d.]+)`, "m").exec(info)?.[1])
    return value("used_cpu_user") + value("used_cpu_sys")
  }
  return {
    sample: async () => {
      try {
        const seconds = (await Promise.all(clients.map(secondsOf))).reduce((sum, s) => sum + s, 0)
        return Number.isFinite(seconds) ? seconds : undefined
      } catch {
        return undefined
      }
    },
    close: () => clients.forEach((client) => client.disconnect())
  }
}
