/**
 * The examples of the README and of the docs pages, run as written, and their tables checked
 * against the code.
 *
 * Every fenced block of README.md and docs/*.md except a JSON sample carries `example=<name>` in
 * its info string (```` ```sh example=walkthrough ````), each name once across the pages;
 * `COVERAGE` below says how each is checked, and the first test fails when a block is added,
 * renamed or removed without saying so here. The service is the
 * one the README's quick start starts (`npm start`: embedded PostgreSQL, in-process stores, the
 * built-in identity provider) on a free port; the only change made to an example before it runs is
 * its address (`localhost:8000` → that port; for the tracing command, the collector's).
 */
import { ConfigProvider, Effect, Result } from "effect"
import { OpenApi } from "effect/http-api"
import { spawn } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createServer, type Server } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import ts from "typescript"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { parse as parseYaml } from "yaml"
import { Api } from "../../src/Api.ts"
import { BUILTIN_ISSUER } from "../../src/Auth/BuiltinProvider.ts"
import { appConfig } from "../../src/Config.ts"
import { errorStatus } from "../../src/Errors.ts"
import { Packages } from "../../src/Ws/Packages.ts"
import { Close } from "../../src/Ws/Protocol.ts"
import { onPath } from "../support/Binaries.ts"
import { freePort } from "../support/Launcher.ts"
import { packageReadmeBlock } from "../support/ClientKit.ts"
import { commandsOf, startShell, type Step } from "../support/Shell.ts"
import { login, seedEmbeddedDatabase } from "../support/TestApp.ts"

const ROOT = process.cwd()

/** The pages whose examples run and whose tables are checked: the README and every page of docs/. */
const PAGES: ReadonlyMap<string, string> = new Map(
  ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)]
    .map((file) => [file, readFileSync(join(ROOT, file), "utf8")] as const)
)
const page = (file: string): string => {
  const text = PAGES.get(file)
  if (text === undefined) throw new Error(`no page ${file}`)
  return text
}
const README = page("README.md")

// --- the pages' blocks -----------------------------------------------------------------------

interface Block {
  readonly file: string
  readonly lang: string
  readonly name: string | undefined
  readonly body: string
  readonly line: number
}

/** Fenced blocks, de-indented (a block inside a list item is indented with it). */
const parseBlocks = (file: string, markdown: string): Array<Block> => {
  const lines = markdown.split("\n")
  const blocks: Array<Block> = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\S*)(.*)$/.exec(lines[i]!)
    if (open === null) continue
    const [, indent = "", lang = "", info = ""] = open
    const end = lines.findIndex((l, j) => j > i && l.trim() === "```")
    if (end < 0) throw new Error(`${file}:${i + 1}: unclosed code block`)
    const body = lines.slice(i + 1, end).map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l)).join("\n")
    blocks.push({ file, lang, name: /(?:^|\s)example=(\S+)/.exec(info)?.[1], body, line: i + 1 })
    i = end
  }
  return blocks
}

const BLOCKS = [...PAGES].flatMap(([file, text]) => parseBlocks(file, text))

const example = (name: string): string => {
  const found = BLOCKS.filter((b) => b.name === name)
  if (found.length !== 1) throw new Error(`the pages have ${found.length} blocks example=${name}`)
  return found[0]!.body
}

/** How each example is checked: by this file unless it says otherwise. */
const COVERAGE: Record<string, string> = {
  // README.md
  "quick-start": "`npm start` starts the service every example here runs against; `npm ci` is .ci/run's install step (not repeated here: it would replace the node_modules every running test shares)",
  "npm-scripts": "`npm run migrate` is run; `npm run dev` is started and stopped with Ctrl-C (SIGINT to its process group), and must exit cleanly; every other line is checked to be a package.json script (`npm test` and `npm run check` are what .ci/run runs, `npm run build` what `npm start` runs first)",
  curl: "run command by command in one shell (after the walk-through), every step's output asserted",
  "ws-door": "run with node",
  "client-install": "run literally on a fresh clone by test/integration/client.install.test.ts, which runs the same lines from packages/client/README.md; checked here to be those lines",
  "client-kit": "typechecked and run twice (the second run works as the first), its output asserted",
  // docs/http-api.md
  walkthrough: "run command by command in one shell, every step's output asserted",
  "client-http": "typechecked and run (with client-paging and client-ws: one program)",
  "client-paging": "typechecked and run after client-http",
  "client-ws": "typechecked and run after client-paging",
  "openapi-generator": "the download is run; the generator is not (it needs Java and downloads itself) — test/integration/docs.test.ts checks the document it reads (OpenAPI 3.1, every $ref resolving, every endpoint with its errors)",
  // docs/errors-and-limits.md
  "validation-error": "the request it describes is made and the body compared",
  // docs/websocket.md
  "ws-json": "run with node",
  "ws-protobuf": "run with node",
  // docs/audit.md
  "audit-explain": "not run (it seeds 1,000,000 rows into PostgreSQL: a benchmark, minutes); the script is checked to exist",
  "audit-export": "run by test/integration/audit.backup.test.ts with psql against a seeded database; the CSV's header, rows and order are checked",
  "rebuild-counters": "run by test/integration/audit.backup.test.ts after a data-only restore without triggers; every total is checked against count(*)",
  // docs/operations.md
  otel: "run with the endpoint pointed at a stand-in collector, which must receive the service's spans",
  profiling: "run",
  // docs/deployment.md
  "compose-up": "not run (no container runtime in the test environment): test/unit/deploy.test.ts runs `docker compose config` when a client is installed and checks the services, replicas, ports and health checks; the README's table of addresses and logins is checked against docker-compose.yml below, and the app's environment there to be a configuration the service accepts",
  "compose-token": "run against the embedded service (the same /login and /authors; in the stack Keycloak answers behind /login)",
  production: "not run (it names your PostgreSQL, Redis and Keycloak); every variable it sets is checked to be a setting in .env.example",
  // docs/troubleshooting.md
  "token-claims": "run in bash with TOKEN set to a token the service issued; its output asserted (issuer, audience, kind, seconds left)",
  // docs/performance.md
  bench: "not run (a full run takes tens of minutes): every command is checked to be `npm run bench` with options bench/README.md documents",
  // docs/scaling.md
  capacity: "run line by line by test/unit/bench.capacity.test.ts in a copy of the files it reads and writes (the committed figures, a fixture result file as the newest): the first line's output must be the page's tables, `--write` must replace them and nothing else; its options are checked here to be documented in bench/README.md",
  // docs/architecture.md
  layout: "every path it names is checked to exist and every module of src/ to be listed",
  "swapped-layer": "run by test/examples/swapped-layer.test.ts; each of its lines is checked to be that test's"
}

/** Points an example at the service under test. */
let baseUrlHost = "localhost:8000"
const local = (text: string) => text.replaceAll("localhost:8000", baseUrlHost)

// --- processes ---------------------------------------------------------------------------------

const shellEnv = (extra: Record<string, string> = {}): Record<string, string> => ({
  PATH: process.env["PATH"] ?? "",
  HOME: process.env["HOME"] ?? "",
  ...extra
})

interface Finished {
  readonly status: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs a command to its end (killed after a minute should it hang, which fails the test). */
const runToEnd = (command: string, args: ReadonlyArray<string>, options: { input?: string; cwd?: string; env?: Record<string, string> } = {}) =>
  new Promise<Finished>((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd ?? ROOT, env: options.env ?? shellEnv(), timeout: 60_000, stdio: "pipe" })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
    child.on("error", reject)
    child.on("close", (status, signal) => resolve({ status, signal, stdout, stderr }))
    child.stdin.end(options.input ?? "")
  })

/** A long-running process in its own process group, with a way to await a line of its output. */
const startProcess = (command: string, args: ReadonlyArray<string>, env: Record<string, string>) => {
  const child = spawn(command, args, { cwd: ROOT, env, detached: true, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  const listeners = new Set<() => void>()
  const onData = (d: Buffer) => {
    output += d.toString()
    for (const listener of listeners) listener()
  }
  child.stdout.on("data", onData)
  child.stderr.on("data", onData)
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)))
  return {
    child,
    output: () => output,
    exited,
    /** Resolves with the first match of `pattern` in the output; rejects if the process ends first. */
    line: (pattern: RegExp) =>
      new Promise<RegExpExecArray>((resolve, reject) => {
        const check = () => {
          const match = pattern.exec(output)
          if (match !== null) {
            listeners.delete(check)
            resolve(match)
          }
        }
        listeners.add(check)
        void exited.then((code) => reject(new Error(`exited (${code}) before ${pattern}:\n${output}`)))
        check()
      }),
    /** SIGTERM to the process (npm hands it to the service), SIGKILL to the group if it lingers. */
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill("SIGTERM")
      const timer = setTimeout(() => {
        try {
          process.kill(-child.pid!, "SIGKILL")
        } catch {
          // already gone
        }
      }, 15_000)
      await exited
      clearTimeout(timer)
    }
  }
}

/** The walk-through and the other curl examples need `curl`, which a machine with only Node lacks. */
const HAS_CURL = onPath("curl")

/** `curl -w ' %{http_code}\n'` output: the JSON body, then the status. */
const answer = (output: string): { status: number; body: unknown } => {
  const match = /^([\s\S]*) (\d{3})$/.exec(output.trim())
  if (match === null) throw new Error(`not "<body> <status>": ${output}`)
  return { status: Number(match[2]), body: match[1] === "" ? undefined : JSON.parse(match[1]!) }
}

const jwtPayload = (token: string) => JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString("utf8")) as Record<string, unknown>

/** Typechecks a module as if it were the file `path` of this project (nothing is written). */
const typecheck = (path: string, source: string): string => {
  const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"))
    }
  })!
  const host = ts.createCompilerHost(config.options)
  const getSourceFile = host.getSourceFile.bind(host)
  const fileExists = host.fileExists.bind(host)
  host.getSourceFile = (name, version, ...rest) =>
    name === path ? ts.createSourceFile(name, source, version) : getSourceFile(name, version, ...rest)
  host.fileExists = (name) => name === path || fileExists(name)
  const program = ts.createProgram([path], config.options, host)
  return ts.formatDiagnostics(ts.getPreEmitDiagnostics(program, program.getSourceFile(path)), host)
}

/** The rows of the first Markdown table after `heading` in `file`, as arrays of cells. */
const tableAfter = (file: string, heading: string): Array<Array<string>> => {
  const text = page(file)
  const at = text.indexOf(`\n${heading}\n`)
  if (at < 0) throw new Error(`${file} has no heading ${heading}`)
  const lines = text.slice(at).split("\n")
  const first = lines.findIndex((l) => l.startsWith("|"))
  const rows: Array<Array<string>> = []
  for (const line of lines.slice(first)) {
    if (!line.startsWith("|")) break
    if (/^\|[-|\s]+\|$/.test(line)) continue
    rows.push(line.slice(1, -1).split(/(?<!\\)\|/).map((c) => c.trim()))
  }
  return rows.slice(1) // without the header
}

const envExampleSettings = () =>
  new Map(
    [...readFileSync(join(ROOT, ".env.example"), "utf8").matchAll(/^#\s*([A-Z][A-Z0-9_]+)=(.*)$/gm)].map((m) => [m[1]!, m[2]!.trim()])
  )

// --- the tests ---------------------------------------------------------------------------------

describe("README and docs examples", () => {
  it("every example is labelled and accounted for, and only JSON samples go unlabelled", () => {
    expect([...PAGES.keys()]).toEqual(expect.arrayContaining([
      "README.md", "docs/architecture.md", "docs/audit.md", "docs/configuration.md", "docs/deployment.md",
      "docs/errors-and-limits.md", "docs/http-api.md", "docs/operations.md", "docs/performance.md", "docs/troubleshooting.md",
      "docs/websocket.md"
    ]))
    const unlabelled = BLOCKS.filter((b) => b.name === undefined && b.lang !== "json").map((b) => `${b.file}:${b.line} (${b.lang || "no language"})`)
    expect(unlabelled).toEqual([])
    const names = BLOCKS.flatMap((b) => (b.name === undefined ? [] : [b.name]))
    expect(new Set(names).size).toBe(names.length)
    expect([...names].sort()).toEqual(Object.keys(COVERAGE).sort())
  })

  describe("against the service `npm start` starts", () => {
    let root: string
    let service: ReturnType<typeof startProcess>
    let port: number
    let stopping = false
    let died: string | undefined

    beforeAll(async () => {
      root = mkdtempSync(join(tmpdir(), "ads-readme-"))
      const dataDir = join(root, "data")
      seedEmbeddedDatabase(dataDir) // a copy of the initialised embedded database, to start fast
      port = await freePort()
      baseUrlHost = `127.0.0.1:${port}`
      const [install, start, ...rest] = example("quick-start").split("&&").map((s) => s.trim())
      expect([install, rest]).toEqual(["npm ci", []])
      service = startProcess("bash", ["-c", start!], shellEnv({
        PORT: String(port),
        HOST: "127.0.0.1",
        DATA_DIR: dataDir,
        PROFILING_OUTPUT_DIR: join(root, "profiling"),
        // Profiling is on by default in development; a shorter interval makes the on-demand
        // capture (which waits for the interval capture in progress) come sooner.
        PROFILING_INTERVAL_SECONDS: "2"
      }))
      await service.line(new RegExp(`Listening on http://127\\.0\\.0\\.1:${port}`))
      void service.exited.then((code) => {
        if (!stopping) died = `the service exited (${code}) before the tests ended:\n${service.output()}`
      })
    })

    // A service that dies under a test fails it with its output, not just a refused connection.
    afterEach(() => {
      if (died !== undefined) throw new Error(died)
    })

    afterAll(async () => {
      stopping = true
      await service?.stop()
      if (root !== undefined) rmSync(root, { recursive: true, force: true })
    })

    it("quick start: npm start serves on the embedded defaults, and says so", () => {
      expect(service.output()).toMatch(/Embedded: database \(PGlite in [^)]+\), cache store \(in-process\), identity provider \(built-in, users from config\/dev-users\.json\)/)
    })

    it.runIf(HAS_CURL)("walk-through with curl: every step answers as its comment says", async () => {
      const shell = startShell(root, shellEnv())
      const steps: Array<Step> = []
      try {
        for (const { label, text } of commandsOf(local(example("walkthrough")))) steps.push(await shell.run(label, text))
        // What the login kept (the walk-through prints nothing there).
        const kept = await shell.run("", `printf '%s %s %s' "$TOKEN" "$REFRESH" "$READER"`)
        const [token, refresh, reader] = kept.output.split(" ")
        expect(jwtPayload(token!)).toMatchObject({ preferred_username: "admin" })
        expect(jwtPayload(refresh!)).toMatchObject({ preferred_username: "admin" })
        expect(jwtPayload(reader!)).toMatchObject({ preferred_username: "reader" })
      } finally {
        shell.close()
      }
      for (const step of steps) {
        expect({ command: step.command, status: step.status, stderr: step.stderr }).toEqual({ command: step.command, status: 0, stderr: "" })
      }

      const outputs = (prefix: string) => {
        const group = steps.filter((s) => s.label.startsWith(prefix))
        expect(group.length, `steps labelled "${prefix}…"`).toBeGreaterThan(0)
        return group.map((s) => s.output)
      }
      const expectations: Array<[string, (outputs: Array<string>) => void]> = [
        ["A helper", (o) => expect(o).toEqual([""])],
        ["Log in", (o) => expect(o).toEqual(["", "", ""])],
        ["Create an author", ([o]) => {
          expect(answer(o!)).toEqual({ status: 201, body: { id: expect.any(Number), name: "Ada Lovelace", created_at: expect.any(String) } })
        }],
        ["The same name again", ([o]) => {
          expect(answer(o!)).toEqual({ status: 409, body: { detail: "Author with name Ada Lovelace already exists" } })
        }],
        ["One more", ([o]) => expect(answer(o!)).toMatchObject({ status: 201, body: { name: "Mary Shelley" } })],
        ["List, filter", ([o]) => {
          const { status, body } = answer(o!)
          expect(status).toBe(200)
          expect((body as Array<{ name: string }>).map((a) => a.name)).toEqual(["Ada Lovelace"])
        }],
        ["Paginate by offset", ([o]) => {
          expect(answer(o!)).toEqual({
            status: 200,
            body: {
              items: [expect.objectContaining({ name: "Ada Lovelace" })],
              meta: { page: 1, per_page: 1, total: 2, pages: 2, next_cursor: expect.any(String), has_more: true }
            }
          })
        }],
        ["… or by cursor", ([assign, o]) => {
          expect(assign).toBe("")
          expect(answer(o!)).toEqual({
            status: 200,
            body: {
              items: [expect.objectContaining({ name: "Mary Shelley" })],
              meta: { page: 1, per_page: 1, total: 2, pages: 2, next_cursor: null, has_more: false }
            }
          })
        }],
        ["Rename", ([assign, renamed, deleted]) => {
          expect(assign).toBe("")
          const created = answer(outputs("Create an author")[0]!).body as { id: number }
          expect(answer(renamed!)).toMatchObject({ status: 200, body: { id: created.id, name: "Augusta Ada King" } })
          expect(deleted!.trim()).toBe("204")
        }],
        ["A reader", ([assign, o]) => {
          expect(assign).toBe("")
          expect(answer(o!)).toEqual({ status: 403, body: { detail: "Forbidden" } })
        }],
        ["Refresh", ([o]) => {
          expect(answer(o!)).toMatchObject({
            status: 200,
            body: { access_token: expect.any(String), refresh_token: expect.any(String), token_type: "Bearer", expires_in: 300, refresh_expires_in: 1800 }
          })
        }],
        ["The audit trail", ([o]) => {
          const { status, body } = answer(o!) as { status: number; body: { items: Array<{ username: string }>; meta: unknown } }
          expect(status).toBe(200)
          expect(body.meta).toMatchObject({ page: 1, per_page: 5 })
          expect(body.items.length).toBeLessThanOrEqual(5)
          expect(body.items.every((i) => i.username === "admin")).toBe(true)
        }],
        ["Health", ([o]) => {
          expect(answer(o!)).toEqual({
            status: 200,
            body: { status: "healthy", database: "healthy", redis: "healthy", websocket: { status: "healthy", active_connections: expect.any(Number) } }
          })
        }],
        ["Metrics", ([o]) => {
          const lines = o!.trimEnd().split("\n")
          expect(lines.length).toBe(10)
          expect(lines[0]).toMatch(/^# (HELP|TYPE) \w+/)
        }]
      ]
      const labels = [...new Set(steps.map((s) => s.label))]
      expect(labels.map((l) => expectations.filter(([prefix]) => l.startsWith(prefix)).length), labels.join(" / ")).toEqual(labels.map(() => 1))
      for (const [prefix, check] of expectations) check(outputs(prefix))
    })

    it.runIf(HAS_CURL)("the README's curl example: log in, create, list", async () => {
      const shell = startShell(root, shellEnv())
      const steps: Array<Step> = []
      try {
        for (const { label, text } of commandsOf(local(example("curl")))) steps.push(await shell.run(label, text))
        const kept = await shell.run("", `printf '%s' "$TOKEN"`)
        expect(jwtPayload(kept.output)).toMatchObject({ preferred_username: "admin" })
      } finally {
        shell.close()
      }
      for (const step of steps) {
        expect({ command: step.command, status: step.status, stderr: step.stderr }).toEqual({ command: step.command, status: 0, stderr: "" })
      }
      expect(steps.map((s) => s.label)).toEqual([
        expect.stringMatching(/^A helper/),
        expect.stringMatching(/^Log in/),
        expect.stringMatching(/^Create an author → .* 201$/),
        expect.stringMatching(/^List, .* 200$/)
      ])
      expect(steps[0]!.output).toBe("")
      expect(steps[1]!.output).toBe("")
      const created = answer(steps[2]!.output)
      expect(created).toEqual({ status: 201, body: { id: expect.any(Number), name: "Octavia Butler", created_at: expect.any(String) } })
      expect(answer(steps[3]!.output)).toEqual({ status: 200, body: [created.body] })
      // The sample in the comment is that answer as a newcomer gets it: the first author of a fresh
      // database has id 1 (here the walk-through ran first); the time is the sample's own.
      const sample = JSON.parse(/→ (\{.*\}) 201$/.exec(steps[2]!.label)![1]!) as Record<string, unknown>
      expect(sample).toEqual({ ...(created.body as Record<string, unknown>), id: 1, created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT[\d:.]+$/) })
      expect(steps[3]!.label).toContain(`[{"id":1,"name":"Octavia Butler",…}]`)
    }, 60_000)

    it("the README's WebSocket example prints the page it asked for", async () => {
      const run = await runToEnd(process.execPath, ["--input-type=module"], { input: local(example("ws-door")) })
      expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: "" })
      const frames = run.stdout.trim().split("\n").map((l) => JSON.parse(l) as { pkg_id: number; status_code: number; data: Array<unknown>; meta: { page: number; per_page: number; total: number } })
      expect(frames).toHaveLength(1)
      expect(frames[0]).toMatchObject({ pkg_id: 2, status_code: 0, meta: { page: 1, per_page: 5 } })
      expect(frames[0]!.data.length).toBe(Math.min(5, frames[0]!.meta.total))
    })

    it("the README's client kit lines typecheck and run, and run again: log in, create, a page over /web", async () => {
      const program = example("client-kit")
      expect(typecheck(join(ROOT, "readme-client-kit.ts"), program)).toBe("")
      // What its comments say it prints (the author's id and name, the page's status and total).
      expect([...program.matchAll(/\/\/ (created|ws) (.*)$/gm)].map((m) => `${m[1]} ${m[2]}`)).toEqual([
        expect.stringMatching(/^created \d+ Ada Lovelace \d+$/),
        expect.stringMatching(/^ws 0 \d+$/)
      ])
      for (const round of [1, 2]) {
        const run = await runToEnd(process.execPath, ["--input-type=module-typescript"], { input: local(program) })
        expect({ round, status: run.status, stderr: run.stderr.replace(/^.*ExperimentalWarning.*\n(.*--trace-warnings.*\n)?/m, "") }).toEqual({ round, status: 0, stderr: "" })
        const [created, ws, ...rest] = run.stdout.trim().split("\n")
        expect({ round, created, ws, rest }).toEqual({
          round,
          created: expect.stringMatching(/^created \d+ Ada Lovelace \d+$/),
          ws: expect.stringMatching(/^ws 0 \d+$/),
          rest: []
        })
        const [, id, name] = /^created (\d+) (.*)$/.exec(created!)!
        const { access_token } = await login({ url: `http://${baseUrlHost}` }, "admin")
        const res = await fetch(`http://${baseUrlHost}/authors/${id}`, { headers: { authorization: `Bearer ${access_token}` } })
        expect(await res.json()).toEqual({ id: Number(id), name, created_at: expect.any(String) })
      }
    }, 60_000)

    it("the README's client-kit install lines are the package README's, which test/integration/client.install.test.ts runs", () => {
      expect(packageReadmeBlock("sh", "install")).toBe(example("client-install"))
      expect(existsSync(join(ROOT, "test/integration/client.install.test.ts"))).toBe(true)
    })

    it("the 422 sample is what the request it names answers", async () => {
      const { access_token } = await login({ url: `http://${baseUrlHost}` }, "admin")
      const res = await fetch(`http://${baseUrlHost}/authors/paginated?per_page=abc`, { headers: { authorization: `Bearer ${access_token}` } })
      expect(page("docs/errors-and-limits.md")).toContain("(`GET /authors/paginated?per_page=abc`)")
      expect({ status: res.status, body: await res.json() }).toEqual({ status: 422, body: JSON.parse(example("validation-error")) })
    })

    it("the token-claims line prints the claims the service checks, and the seconds the token has left", async () => {
      const { access_token, expires_in } = await login({ url: `http://${baseUrlHost}` }, "reader")
      const run = await runToEnd("bash", ["-c", example("token-claims")], { env: shellEnv({ TOKEN: access_token }) })
      expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: "" })
      const printed = JSON.parse(run.stdout) as Record<string, unknown>
      expect(printed).toEqual({ iss: BUILTIN_ISSUER, aud: "author-directory", azp: "author-directory", typ: "Bearer", expires_in: expect.any(Number) })
      expect(printed["expires_in"]).toBeGreaterThan(0)
      expect(printed["expires_in"]).toBeLessThanOrEqual(expires_in)
    })

    it("the WebSocket JSON client prints its 2 responses and the author.created broadcast", async () => {
      const run = await runToEnd(process.execPath, ["--input-type=module"], { input: local(example("ws-json")) })
      expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: "" })
      const frames = run.stdout.trim().split("\n").map((l) => JSON.parse(l) as { pkg_id: number; req_id: string; status_code: number; data: unknown; meta: unknown })
      expect(frames).toHaveLength(3)
      const created = frames.find((f) => f.pkg_id === 3)
      const page = frames.find((f) => f.pkg_id === 2)
      const broadcast = frames.find((f) => f.pkg_id === 0)
      expect(created).toMatchObject({ status_code: 0, data: { name: expect.stringMatching(/^Mary Shelley \d+$/) }, meta: null })
      expect(page).toMatchObject({ status_code: 0, meta: { page: 1, per_page: 5 } })
      expect(broadcast).toMatchObject({
        req_id: "00000000-0000-0000-0000-000000000000",
        data: { event: "author.created", author: { name: (created!.data as { name: string }).name } }
      })
    })

    it("the WebSocket protobuf client prints the decoded page", async () => {
      const run = await runToEnd(process.execPath, ["--input-type=module"], { input: local(example("ws-protobuf")) })
      expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: "" })
      const response = JSON.parse(run.stdout) as { status_code: number; data: Array<{ id: number }>; meta: { page: number; per_page: number; total: number } }
      expect(response).toMatchObject({ status_code: 0, meta: { page: 1, per_page: 5 } })
      expect(response.data.length).toBe(Math.min(5, response.meta.total))
    })

    it("the client kit snippets typecheck and run as one program", async () => {
      const program = ["client-http", "client-paging", "client-ws"].map(example).join("\n")
      expect(typecheck(join(ROOT, "readme-client.ts"), program)).toBe("")
      const run = await runToEnd(process.execPath, ["--input-type=module-typescript"], { input: local(program) })
      expect({ status: run.status, stderr: run.stderr.replace(/^.*ExperimentalWarning.*\n(.*--trace-warnings.*\n)?/m, "") }).toEqual({ status: 0, stderr: "" })
      // Without the broadcasts `onBroadcast` prints (none is expected: nothing is created while connected).
      const lines = run.stdout.trim().split("\n").filter((l) => !l.startsWith("author."))
      expect(lines).toEqual([
        expect.stringMatching(/^created \d+ Ada Lovelace \d+$/),
        expect.stringMatching(/^Author with name Ada Lovelace \d+ already exists$/),
        expect.stringMatching(/^pages \d+ authors \d+$/),
        expect.stringMatching(/^ws 0 \d+$/)
      ])
      const [, pages, authors] = /^pages (\d+) authors (\d+)$/.exec(lines[2]!)!.map(Number)
      expect(pages).toBe(Math.ceil(authors! / 100))
      expect(lines[3]).toBe(`ws 0 ${authors}`)
      expect(lines[1]).toBe(`Author with name ${lines[0]!.split(" ").slice(2).join(" ")} already exists`)
    })

    it.runIf(HAS_CURL)("the OpenAPI document downloads as the generator command expects it", async () => {
      const [download, generate, ...rest] = example("openapi-generator").split("\n")
      expect(rest).toEqual([])
      expect(generate).toMatch(/^npx @openapitools\/openapi-generator-cli generate -i openapi\.json -g \w+ -o \S+$/)
      const cwd = join(root, "openapi")
      mkdirSync(cwd, { recursive: true })
      const run = await runToEnd("bash", ["-c", local(download!)], { cwd })
      expect(run.status).toBe(0)
      const document = JSON.parse(readFileSync(join(cwd, "openapi.json"), "utf8")) as { openapi: string; paths: Record<string, unknown> }
      expect(document.openapi).toMatch(/^3\.1\./)
      expect(Object.keys(document.paths)).toContain("/authors/paginated")
    })

    it.runIf(HAS_CURL)("profiling: the on-demand capture answers 201 with the report's descriptor", async () => {
      const run = await runToEnd("bash", ["-c", local(example("profiling"))], { cwd: root })
      expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: "" })
      expect(answer(run.stdout)).toEqual({
        status: 201,
        body: { filename: expect.stringMatching(/^profile-[A-Za-z0-9._-]*\.html$/), path: expect.any(String), size_bytes: expect.any(Number), created_at: expect.any(Number) }
      })
    })

    it.runIf(HAS_CURL)("the compose stack's token commands work the same against the embedded service", async () => {
      const run = await runToEnd("bash", ["-c", local(example("compose-token"))], { cwd: root })
      expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: "" })
      const { access_token } = await login({ url: `http://${baseUrlHost}` }, "admin")
      const listed = await fetch(`http://${baseUrlHost}/authors`, { headers: { authorization: `Bearer ${access_token}` } })
      expect(JSON.parse(run.stdout)).toEqual(await listed.json())
    })

    it("npm scripts: each command is a script; `npm run migrate` migrates and exits", async () => {
      const scripts = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts
      const commands = example("npm-scripts").split("\n").map((l) => l.replace(/#.*$/, "").trim()).filter((l) => l !== "")
      for (const command of commands) {
        const name = /^npm (?:run (\S+)|(test|start))$/.exec(command)
        expect(name, command).not.toBeNull()
        expect(Object.keys(scripts), command).toContain(name![1] ?? name![2])
      }
      expect(commands).toContain("npm run migrate")
      const dataDir = join(root, "migrate")
      seedEmbeddedDatabase(dataDir)
      const run = await runToEnd("bash", ["-c", "npm run migrate"], { env: shellEnv({ DATA_DIR: dataDir, LOG_FORMAT: "json" }) })
      expect(run.status, run.stdout + run.stderr).toBe(0)
      expect(run.stdout).toContain("Migrations are up to date")
    })

    it("npm run dev: serves the sources, and Ctrl-C (SIGINT to its process group) stops it cleanly", async () => {
      expect(example("npm-scripts")).toMatch(/^npm run dev\b/m)
      const dataDir = join(root, "dev")
      seedEmbeddedDatabase(dataDir)
      const devPort = await freePort()
      // Its own process group, as a terminal runs it: Ctrl-C signals npm, Node's watch mode and the service.
      const dev = startProcess("npm", ["run", "dev"], shellEnv({ PORT: String(devPort), HOST: "127.0.0.1", DATA_DIR: dataDir, PROFILING_ENABLED: "false" }))
      try {
        await dev.line(new RegExp(`Listening on http://127\\.0\\.0\\.1:${devPort}`))
        expect((await fetch(`http://127.0.0.1:${devPort}/livez`)).status).toBe(200)
        process.kill(-dev.child.pid!, "SIGINT")
        const code = await dev.exited
        // The service drains and exits; Node's watch mode ends with it. (Given an --env-file-if-exists
        // naming a file that does not exist, Node 24's watch mode aborts here on an assertion.)
        expect(dev.output()).toContain("Shutting down")
        expect(/Assertion failed|Aborted|core dumped/.test(dev.output()), dev.output()).toBe(false)
        expect([0, 130, "SIGINT"], dev.output()).toContain(code)
      } finally {
        await dev.stop()
      }
    })
  })

  it("tracing: the service started by the README's command posts its spans to the endpoint", async () => {
    const received: Array<{ path: string; body: string }> = []
    let arrived: () => void = () => {}
    const firstPost = new Promise<void>((resolve) => (arrived = resolve))
    const collector: Server = createServer((req, res) => {
      let body = ""
      req.on("data", (d: Buffer) => (body += d.toString()))
      req.on("end", () => {
        received.push({ path: req.url ?? "", body })
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
        arrived()
      })
    })
    await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve))
    const address = collector.address()
    const collectorPort = typeof address === "object" && address !== null ? address.port : 0
    const root = mkdtempSync(join(tmpdir(), "ads-readme-otel-"))
    seedEmbeddedDatabase(join(root, "data"))
    const port = await freePort()
    const command = example("otel")
    expect(command).toContain("http://localhost:4318")
    const service = startProcess("bash", ["-c", command.replaceAll("http://localhost:4318", `http://127.0.0.1:${collectorPort}`)], shellEnv({
      PORT: String(port),
      HOST: "127.0.0.1",
      DATA_DIR: join(root, "data"),
      PROFILING_ENABLED: "false"
    }))
    try {
      await service.line(new RegExp(`Listening on http://127\\.0\\.0\\.1:${port}`))
      const res = await fetch(`http://127.0.0.1:${port}/authors`)
      expect(res.status).toBe(401)
      await service.stop() // spans are flushed at shutdown at the latest
      expect(await service.exited).toBe(0) // npm start hands SIGTERM to the service, which drains and exits 0
      await firstPost
      const traces = received.filter((r) => r.path === "/v1/traces").map((r) => r.body).join("\n")
      expect(traces).toContain("author-directory-service")
      expect(traces).toContain("GET /authors")
    } finally {
      await service.stop()
      collector.close()
      rmSync(root, { recursive: true, force: true })
    }
  })
})

describe("README and docs true to the code", () => {
  it("layout: every path it names exists, and every module of src/ is listed", () => {
    const lines = example("layout").split("\n")
    const topLevel = lines.flatMap((l) => /^(\S+)\s/.exec(l)?.[1] ?? [])
    for (const entry of topLevel) expect(existsSync(join(ROOT, entry)), entry).toBe(true)
    const srcLines = lines.slice(lines.indexOf("src/") + 1, lines.findIndex((l, i) => i > 0 && /^\S/.test(l)))
    const listed = srcLines.flatMap((l) => /^ {2}(\S+)\s/.exec(l)?.[1] ?? [])
    for (const entry of listed) expect(existsSync(join(ROOT, "src", entry)), `src/${entry}`).toBe(true)
    const actual = readdirSync(join(ROOT, "src"), { withFileTypes: true }).map((e) => (e.isDirectory() ? `${e.name}/` : e.name))
    expect([...listed].sort()).toEqual([...actual].sort())
    const testLine = lines.find((l) => l.startsWith("test/"))!
    const testDirs = [...testLine.slice("test/".length).matchAll(/(\w+)\//g)].map((m) => m[1]!)
    const actualTestDirs = readdirSync(join(ROOT, "test"), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name)
    expect([...testDirs].sort()).toEqual([...actualTestDirs].sort())
  })

  it("configuration: the table lists exactly the variables src/Config.ts and src/Config/ read and .env.example shows, with its defaults", () => {
    const settings = envExampleSettings()
    const sources = ["Config.ts", ...readdirSync(join(ROOT, "src/Config")).map((file) => `Config/${file}`)]
    const text = sources.map((file) => readFileSync(join(ROOT, "src", file), "utf8")).join("\n")
    const read = new Set([...text.matchAll(/[(,]\s*"([A-Z][A-Z0-9_]{2,})"/g)].map((m) => m[1]!))
    const rows = tableAfter("docs/configuration.md", "## Settings")
    const documented = new Map(rows.flatMap((r) => [...r[0]!.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => [m[1]!, r[1]!] as const)))
    expect([...documented.keys()].sort()).toEqual([...read].sort())
    expect([...documented.keys()].sort()).toEqual([...settings.keys()].sort())
    for (const [name, cell] of documented) {
      const single = /^`([^`]*)`$/.exec(cell)
      if (single !== null) expect(`${name}=${single[1]}`).toBe(`${name}=${settings.get(name)}`)
    }
  })

  it("metrics: the table names exactly the metrics the service registers", () => {
    const registered = [...readFileSync(join(ROOT, "src/Observability/Metrics.ts"), "utf8").matchAll(/\bname: "([a-z_]+)"/g)].map((m) => m[1]!)
    const rows = tableAfter("docs/operations.md", "## Metrics — `GET /metrics`")
    const documented = rows.flatMap((r) => [...r[0]!.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!))
    expect([...documented].sort()).toEqual([...registered].sort())
  })

  it("endpoints: every operation of the OpenAPI document is in the table, with its method", () => {
    const rows = tableAfter("docs/http-api.md", "## Endpoints").map((r) => r[0]!)
    const paths = (OpenApi.fromApi(Api) as { paths: Record<string, Record<string, unknown>> }).paths
    for (const [path, operations] of Object.entries(paths)) {
      const pattern = new RegExp(`(?<![\\w/{}-])${path.replace(/[{}]/g, "\\$&")}(?![\\w/{}-])`)
      const mentioning = rows.filter((r) => pattern.test(r))
      expect(mentioning.length, path).toBeGreaterThan(0)
      for (const method of Object.keys(operations)) {
        expect(mentioning.some((r) => r.includes(method.toUpperCase())), `${method.toUpperCase()} ${path}`).toBe(true)
      }
    }
  })

  it("compose: the addresses and logins of the table are docker-compose.yml's", () => {
    const compose = parseYaml(readFileSync(join(ROOT, "docker-compose.yml"), "utf8")) as {
      services: Record<string, { ports?: Array<string>; environment?: Record<string, string> }>
    }
    // `[host address:]host port:container port`: the host port is the one a browser opens.
    const published = Object.values(compose.services).flatMap((s) => (s.ports ?? []).map((p) => Number(p.split(":").at(-2))))
    const rows = tableAfter("docs/deployment.md", "## The compose stack")
    for (const row of rows) {
      for (const m of row[1]!.matchAll(/localhost:(\d+)/g)) expect(published, row[0]).toContain(Number(m[1]))
    }
    const login = (what: string) => rows.find((r) => r[0]!.startsWith(what))![2]
    const keycloak = compose.services["keycloak"]!.environment!
    expect(login("Keycloak")).toContain(`\`${keycloak["KC_BOOTSTRAP_ADMIN_USERNAME"]}\` / \`${keycloak["KC_BOOTSTRAP_ADMIN_PASSWORD"]}\``)
    const grafana = compose.services["grafana"]!.environment!
    expect(login("Grafana")).toContain(`\`${grafana["GF_SECURITY_ADMIN_USER"]}\` / \`${grafana["GF_SECURITY_ADMIN_PASSWORD"]}\``)
    // The service names the section's commands use.
    const deployment = page("docs/deployment.md")
    const section = deployment.slice(deployment.indexOf("## The compose stack"), deployment.indexOf("## Kubernetes"))
    for (const m of section.matchAll(/docker compose (?:exec|up --scale) (\w+)/g)) expect(Object.keys(compose.services)).toContain(m[1])
    expect(section).toContain(`psql -U ${compose.services["postgres"]!.environment!["POSTGRES_USER"]}`)
  })

  it("compose: the app's environment in docker-compose.yml is a configuration the service accepts", async () => {
    const compose = parseYaml(readFileSync(join(ROOT, "docker-compose.yml"), "utf8")) as { services: { app: { environment: Record<string, string> } } }
    const env = compose.services.app.environment
    const config = await Effect.runPromise(Effect.result(
      appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))
    ))
    expect(Result.isSuccess(config) ? "accepted" : String(config.failure)).toBe("accepted")
  })

  it("production: every variable the command sets is a setting", () => {
    const settings = envExampleSettings()
    const lines = example("production").split("\n").map((l) => l.replace(/\\$/, "").trim())
    expect(lines.at(-1)).toBe("npm start")
    const assigned = lines.slice(0, -1).map((l) => /^([A-Z][A-Z0-9_]+)=\S+$/.exec(l)?.[1])
    for (const name of assigned) expect(settings.has(name!), name).toBe(true)
  })

  it("the swapped-Layer sample is the code of test/examples/swapped-layer.test.ts", () => {
    const test = new Set(readFileSync(join(ROOT, "test/examples/swapped-layer.test.ts"), "utf8").split("\n").map((l) => l.trim()))
    const code = example("swapped-layer").split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("//"))
    expect(code.filter((l) => !test.has(l))).toEqual([])
  })

  it("the audit-explain command names a script that exists", () => {
    const script = /node (\S+\.ts)$/.exec(example("audit-explain").trim())?.[1]
    expect(script !== undefined && existsSync(join(ROOT, script))).toBe(true)
  })

  it("errors: every client-visible error of src/Errors.ts is in the table, with its HTTP status and detail", () => {
    const rows = tableAfter("docs/errors-and-limits.md", "## HTTP errors")
    for (const [tag, { http }] of Object.entries(errorStatus)) {
      const row = rows.find((r) => r[2] === `\`${tag}\``)
      expect(row, tag).toBeDefined()
      expect(`${tag} ${row![0]}`).toBe(`${tag} ${http}`)
    }
    // Each row's detail is one the code answers (placeholders such as <id> stand for any text).
    const source = readFileSync(join(ROOT, "src/Errors.ts"), "utf8") + readFileSync(join(ROOT, "src/Http/Http1.ts"), "utf8") +
      readFileSync(join(ROOT, "src/Http/NodeServer.ts"), "utf8")
    for (const row of rows) {
      for (const m of row[1]!.matchAll(/`([^`]+)`/g)) {
        const literal = m[1]!.split(/<[^>]+>/).map((part) => part.trim()).filter((part) => part !== "")
        for (const part of literal) expect(source, `${row[0]} ${m[1]}`).toContain(part)
      }
    }
  })

  it("WebSocket: the close-code table is every close the server initiates", () => {
    const rows = tableAfter("docs/websocket.md", "## Close codes")
    const documented = rows.map((r) => `${r[0]} ${/^`([^`]*)`$/.exec(r[1]!)?.[1] ?? ""}`)
    for (const close of Object.values(Close)) expect(documented, `${close.code} ${close.reason}`).toContain(`${close.code} ${close.reason}`)
    // The one close the server does not initiate itself: the WebSocket library's, for invalid UTF-8.
    const initiated = new Set(Object.values(Close).map((c) => `${c.code} ${c.reason}`))
    expect(documented.filter((d) => !initiated.has(d))).toEqual(["1007 "])
  })

  it("WebSocket: the package table is the server's", () => {
    const rows = tableAfter("docs/websocket.md", "## Messages")
    expect(rows.map((r) => `${r[0]} ${r[1]} ${r[2]}`)).toEqual(
      [...Packages.values()].map((p) => `${p.pkgId} \`${p.name}\` ${p.roles.map((role) => `\`${role}\``).join(", ")}`)
    )
  })

  it("bench: every command is `npm run bench` with options bench/README.md documents", () => {
    const documented = readFileSync(join(ROOT, "bench/README.md"), "utf8")
    const commands = example("bench").split("\n").filter((l) => l.trim() !== "" && !l.startsWith("#")).join("\n").replace(/\\\n\s*/g, " ").split("\n")
    expect(commands.length).toBeGreaterThan(0)
    for (const command of commands) {
      expect(command).toMatch(/(^|\s)npm run bench( -- |$)/)
      for (const m of command.matchAll(/\s(--[a-z-]+)/g)) expect(documented, m[1]).toContain(`\`${m[1]}`)
      for (const m of command.matchAll(/\b(BENCH_[A-Z_]+)=/g)) expect(documented, m[1]).toContain(m[1])
    }
  })

  it("capacity: every command is bench/capacity.ts with options bench/README.md documents", () => {
    const documented = readFileSync(join(ROOT, "bench/README.md"), "utf8")
    const commands = example("capacity").split("\n").filter((l) => l.trim() !== "")
    expect(commands.length).toBeGreaterThan(0)
    for (const command of commands) {
      expect(command).toMatch(/^node bench\/capacity\.ts( |$)/)
      for (const m of command.replace(/#.*$/, "").matchAll(/\s(--[a-z-]+)/g)) expect(documented, m[1]).toContain(`\`${m[1]}`)
    }
  })

  it("links: every relative link of the README and the docs names a file that exists, and an anchor its page has", () => {
    const slug = (heading: string) =>
      heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-")
    const anchors = (file: string) =>
      new Set([...readFileSync(join(ROOT, file), "utf8").matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1]!)))
    const broken: Array<string> = []
    for (const [file, text] of PAGES) {
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!
        if (/^[a-z]+:/.test(target)) continue
        const [path = "", anchor] = target.split("#")
        const resolved = path === "" ? file : join(file, "..", path)
        if (!existsSync(join(ROOT, resolved))) broken.push(`${file}: ${target}`)
        else if (anchor !== undefined && resolved.endsWith(".md") && !anchors(resolved).has(anchor)) broken.push(`${file}: ${target}`)
      }
    }
    expect(broken).toEqual([])
  })

  it("the README's account of what runs is COVERAGE's: the examples not run, the download-only one, the one run elsewhere", () => {
    const account = README.slice(README.indexOf("`test/examples/readme.test.ts` accounts for every example")).replace(/\s+/g, " ")
    const names = (text: string | undefined) => [...(text ?? "").matchAll(/`([a-z-]+)`/g)].map((m) => m[1]!).sort()
    const how = (prefix: string) => Object.keys(COVERAGE).filter((name) => COVERAGE[name]!.startsWith(prefix)).sort()
    expect(names(/checked without running them: ([^(]+)\(/.exec(account)?.[1])).toEqual(how("not run"))
    expect(names(/of (`[a-z-]+`) only the download runs/.exec(account)?.[1])).toEqual(how("the download is run"))
    const elsewhere = /(`[a-z-]+`) runs literally on a fresh clone in `([^`]+)`/.exec(account)
    expect(names(elsewhere?.[1])).toEqual(how("run literally on a fresh clone"))
    expect(COVERAGE["client-install"]).toContain(`by ${elsewhere?.[2]}`)
  })

  it("the README is a door: one screenful of pages, linking every page of docs/", () => {
    expect(README.split("\n").length).toBeLessThanOrEqual(250)
    for (const file of PAGES.keys()) if (file !== "README.md") expect(README, file).toContain(`](${file})`)
  })

  it("no page cites a document outside the repository", () => {
    for (const [file, text] of PAGES) expect(text, file).not.toMatch(/\b(CONTRACT|INTERFACE)(\.md| §)|\.\.\/shared\//)
  })
})
