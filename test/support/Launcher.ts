/**
 * The one way tests start the service, in either of two modes:
 *
 * - in process: `startTestApp` (TestApp.ts) — the app's layers on a free port of this process, for
 *   tests of what the service answers;
 * - as a child process: `startService` — `node dist/main.js`, the entry point `npm start` and the image run
 *   (built by the global setup), for start-up, signals, exit codes, log lines and faults.
 *
 * Tests that run another program (the README's commands, `npm start`'s own arguments are given
 * here as `nodeArgs`, `node dist/migrate.js`, scripts) spawn it themselves.
 */
import { spawn, type ChildProcess } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { eventually } from "./Eventually.ts"
import { freePort } from "./Ports.ts"
import { seedEmbeddedDatabase } from "./TestApp.ts"

export { startTestApp, type TestApp } from "./TestApp.ts"
export { freePort }

/** Cleanups a test registers (run newest first by the test file's `afterEach`). */
export type Cleanups = Array<() => Promise<void>>

export const runCleanups = async (cleanups: Cleanups) => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
}

export interface ServiceOptions {
  /**
   * Variables over the defaults (PORT: a free port, HOST: 127.0.0.1, DATA_DIR: a fresh directory
   * removed at the end, LOG_FORMAT: json, PROFILING_ENABLED: false); one given as `undefined` is left
   * unset (the service's own default applies).
   */
  readonly env?: Record<string, string | undefined>
  /** `"none"`: only PATH and HOME besides `env` — nothing of the defaults above. */
  readonly defaults?: "test" | "none"
  /** The service's entry point, run by `node` (default `dist/main.js`). */
  readonly entry?: "dist/main.js" | "src/main.ts"
  /** Node's own arguments before the entry (e.g. `npm start`'s `--env-file-if-exists=.env`). */
  readonly nodeArgs?: ReadonlyArray<string>
  /** The working directory (default this one). */
  readonly cwd?: string
  /** Resolve once this path answers 200 (default `/readyz`), or at once (`"none"`). A process that exits meanwhile fails the wait with its output. */
  readonly ready?: "/readyz" | "/livez" | "/health" | "none"
  /** The port it listens on when `env` does not say (its `.env` file does): where the readiness path is asked. */
  readonly port?: number
  /** Copy the initialised embedded database into the fresh DATA_DIR first: a start without initdb. */
  readonly seedEmbedded?: boolean
  /** Where to register the process's disposal (see `Service.dispose`). */
  readonly cleanups?: Cleanups
}

export interface Service {
  readonly child: ChildProcess
  /** Resolves once the process exists (rejects if it could not be started). */
  readonly spawned: Promise<void>
  readonly pid: number | undefined
  readonly port: number
  /** `http://HOST:PORT` (127.0.0.1 when HOST is unset or a wildcard). */
  readonly url: string
  /** The DATA_DIR the launcher made, if it made one. */
  readonly dataDir: string | undefined
  readonly stdout: () => string
  readonly stderr: () => string
  /** Every non-empty line written, stdout then stderr. */
  readonly lines: () => Array<string>
  /** The JSON log lines on stdout (LOG_FORMAT=json), parsed; other lines are skipped. */
  readonly logLines: () => Array<Record<string, unknown>>
  /** Resolves once stdout holds `text`, or the process has exited (the test's own checks then fail with what it wrote). */
  readonly logged: (text: string) => Promise<void>
  /** Resolves with the exit code (or the signal name) when the process ends. */
  readonly exited: Promise<number | string>
  readonly running: () => boolean
  /** Sends `signal` (default SIGTERM) and resolves with the exit code and how long the process took to exit. */
  readonly stop: (signal?: NodeJS.Signals) => Promise<{ readonly code: number | string; readonly ms: number }>
  /** SIGKILL if still running, then removes the DATA_DIR the launcher made. */
  readonly dispose: () => Promise<void>
}

const parsedLine = (line: string): Array<Record<string, unknown>> => {
  try {
    const parsed: unknown = JSON.parse(line)
    return typeof parsed === "object" && parsed !== null ? [parsed as Record<string, unknown>] : []
  } catch {
    return []
  }
}

/** Starts the service as a child process and, unless `ready: "none"`, waits until it answers 200 on the readiness path. */
export const startService = async (options: ServiceOptions = {}): Promise<Service> => {
  const env = options.env ?? {}
  const base: Record<string, string | undefined> = { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "" }
  let madeDir: string | undefined
  if (options.defaults !== "none") {
    if (!("DATA_DIR" in env)) madeDir = mkdtempSync(join(tmpdir(), "ads-service-"))
    Object.assign(base, { LOG_FORMAT: "json", PROFILING_ENABLED: "false", HOST: "127.0.0.1", DATA_DIR: madeDir })
    if (!("PORT" in env)) base["PORT"] = String(await freePort())
  }
  const merged = { ...base, ...env }
  const childEnv = Object.fromEntries(Object.entries(merged).filter((entry): entry is [string, string] => entry[1] !== undefined))
  const dataDir = childEnv["DATA_DIR"]
  if (options.seedEmbedded === true) {
    if (dataDir === undefined) throw new Error("seedEmbedded needs a DATA_DIR")
    seedEmbeddedDatabase(dataDir)
  }
  const port = childEnv["PORT"] !== undefined ? Number(childEnv["PORT"]) : options.port ?? 8000
  const host = childEnv["HOST"] === undefined || childEnv["HOST"] === "0.0.0.0" || childEnv["HOST"] === "::" ? "127.0.0.1" : childEnv["HOST"]
  const url = `http://${host}:${port}`

  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), options.entry ?? "dist/main.js"], {
    cwd: options.cwd,
    env: childEnv,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const spawned = new Promise<void>((resolve, reject) => child.once("spawn", resolve).once("error", reject))
  void spawned.catch(() => undefined)
  let out = ""
  let err = ""
  child.stdout?.on("data", (d: Buffer) => (out += d.toString()))
  child.stderr?.on("data", (d: Buffer) => (err += d.toString()))
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)))
  const running = () => child.exitCode === null && child.signalCode === null
  const lines = () => [...out.split("\n"), ...err.split("\n")].filter((line) => line.trim() !== "")

  const service: Service = {
    child,
    spawned,
    pid: child.pid,
    port,
    url,
    dataDir: madeDir,
    stdout: () => out,
    stderr: () => err,
    lines,
    logLines: () => out.split("\n").flatMap(parsedLine),
    logged: (text) =>
      new Promise<void>((resolve) => {
        const check = () => {
          if (out.includes(text)) {
            child.stdout?.off("data", check)
            resolve()
          }
        }
        child.stdout?.on("data", check)
        void exited.then(() => resolve())
        check()
      }),
    exited,
    running,
    stop: async (signal = "SIGTERM") => {
      const started = performance.now()
      child.kill(signal)
      const code = await exited
      return { code, ms: Math.round(performance.now() - started) }
    },
    dispose: async () => {
      if (running()) {
        child.kill("SIGKILL")
        await exited
      }
      if (madeDir !== undefined) rmSync(madeDir, { recursive: true, force: true })
    }
  }
  options.cleanups?.push(service.dispose)

  const ready = options.ready ?? "/readyz"
  if (ready !== "none") {
    try {
      const outcome = await eventually(async () => {
        if (!running()) return "exited" as const
        return (await fetch(`${url}${ready}`).catch(() => undefined))?.status === 200 && ("ready" as const)
      }, `the service to answer 200 on ${ready}`)
      if (outcome === "exited") throw new Error(`the service exited ${await exited} before answering 200 on ${ready}:\n${lines().join("\n")}`)
    } catch (error) {
      if (options.cleanups === undefined) await service.dispose()
      throw error
    }
  }
  return service
}
