/**
 * The client kit as a client developer gets it: `npm pack` of packages/client (its `prepack` builds
 * dist/ from src/ if stale), the tarball installed into an empty project outside this repository
 * (effect from the npm cache), a program type-checked there by TypeScript (strict, nodenext, the
 * DOM library and no Node types: what the package's declarations need from the consumer) and run
 * as plain JavaScript against a running service by each runtime the package claims besides
 * browsers (client.browser.test.ts): the tests' Node, the oldest Node of its `engines`, Bun and
 * Deno (test/support/Runtimes.ts installs the last three) — and the package README's examples by node. The tarball holds only the build and the
 * licence; its bundle imports only `effect`.
 */
import { execFile } from "node:child_process"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { isClientBuildFresh } from "../../scripts/build-client.ts"
import { CLIENT_PACKAGE, packageReadmeBlock, writeConsumerTsconfig } from "../support/ClientKit.ts"
import { RUNTIME_VERSIONS, runtimeBinary } from "../support/Runtimes.ts"
import { startTestApp, type TestApp } from "../support/TestApp.ts"

const ROOT = process.cwd()
const PACKAGE = CLIENT_PACKAGE
const run = promisify(execFile)

/**
 * The consumer's program. `@ts-expect-error` lines fail the type-check if the declarations lose
 * their precision (an `any` accepts anything, and the directive is then unused).
 */
const PROGRAM = String.raw`
import { Effect } from "effect"
import {
  AuthorNameTaken, type BroadcastEvent, connectWs, createClient, makeClient, ValidationError
} from "@author-directory/client"

const baseUrl = process.argv[2]!
const out = (line: Record<string, unknown>) => console.log(JSON.stringify(line))
const stamp = Date.now()

// Effect API: login, create (201), list, the typed 409.
const client = await Effect.runPromise(makeClient({ baseUrl }))
await Effect.runPromise(client.login("admin", "admin"))
const [created, response] = await Effect.runPromise(
  client.api.authors.create({ payload: { name: "Pack " + stamp }, responseMode: "decoded-and-response" })
)
out({ step: "create", status: response.status, id: created.id, name: created.name })
const listed = await Effect.runPromise(client.api.authors.list({ query: { search: "Pack " + stamp } }))
out({ step: "list", ids: listed.map((a) => a.id) })
const duplicate = await Effect.runPromise(client.api.authors.create({ payload: { name: created.name } }).pipe(
  Effect.map(() => "created twice"),
  Effect.catchTag("AuthorNameTaken", (error) => Effect.succeed({ tag: error._tag, detail: error.detail, isClass: error instanceof AuthorNameTaken }))
))
out({ step: "409", duplicate })
// @ts-expect-error: the payload is { name }, typed from the service's declaration
client.api.authors.create({ payload: { nam: "x" } })
// @ts-expect-error: author_id is a number
client.api.authors.get({ params: { author_id: "1" } })

// The WebSocket: a request answered by req_id, and the broadcast of a create.
const token = () => Effect.runPromise(client.accessToken)
for (const format of ["json", "protobuf"] as const) {
  let resolveBroadcast: (event: BroadcastEvent) => void = () => {}
  const name = "Broadcast " + format + " " + stamp
  const broadcast = new Promise<BroadcastEvent>((resolve) => (resolveBroadcast = resolve))
  const ws = await connectWs({ url: baseUrl, format, token, onBroadcast: (event) => { if (event.author.name === name) resolveBroadcast(event) } })
  const page = await ws.request(2, { page: 1, per_page: 1 })
  const createdOverWs = await ws.request<{ id: number; name: string }>(3, { name })
  const event = await broadcast
  out({ step: "ws", format, page: { status: page.status_code, per_page: page.meta?.per_page, total: page.meta?.total }, created: createdOverWs.data, broadcast: { event: event.event, id: event.author.id } })
  await ws.close()
}

// The Promise facade.
const facade = createClient({ baseUrl })
await facade.login("editor", "editor")
const made = await facade.authors.create({ name: "Facade " + stamp })
const got = await facade.authors.get(made.id)
const taken = await facade.authors.create({ name: made.name }).then(() => undefined, (error: unknown) => error)
const invalid = await facade.authors.create({ name: "   " }).then(() => undefined, (error: unknown) => error)
const renamed = await facade.authors.update(made.id, { name: "Facade renamed " + stamp })
out({
  step: "facade",
  same: got.id === made.id && got.name === made.name,
  taken: taken instanceof AuthorNameTaken ? taken.detail : String(taken),
  invalid: invalid instanceof ValidationError ? invalid.detail.map((d) => d.type) : String(invalid),
  renamed: renamed.name
})
`

describe("the client package, installed from its tarball into an empty project", () => {
  let app: TestApp
  let work: string
  let project: string
  let tarball: string
  let packed: Array<string>

  beforeAll(async () => {
    app = await startTestApp()
    work = mkdtempSync(join(tmpdir(), "ads-client-pack-"))
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", work], { cwd: PACKAGE, maxBuffer: 16 * 1024 * 1024 })
    const [info] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>
    tarball = join(work, info!.filename)
    packed = info!.files.map((f) => f.path).sort()
    project = join(work, "consumer")
    mkdirSync(project)
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }))
    await run("npm", ["install", tarball, "--prefer-offline", "--no-audit", "--no-fund"], { cwd: project })
    writeConsumerTsconfig(project, ["*.ts"])
    // `process.argv` without Node's types: the one global the program needs beyond the DOM library.
    writeFileSync(join(project, "globals.d.ts"), "declare const process: { readonly argv: ReadonlyArray<string> }\n")
    writeFileSync(join(project, "program.ts"), PROGRAM)
    writeFileSync(join(project, "readme-promise.ts"), packageReadmeBlock("ts", "promise"))
    writeFileSync(join(project, "readme-effect.ts"), packageReadmeBlock("ts", "effect"))
  }, 180_000)

  afterAll(async () => {
    await app?.close()
    if (work !== undefined) rmSync(work, { recursive: true, force: true })
  })

  it("packs the build of the current sources", () => {
    // `prepack` rebuilt dist/ if any source was newer; what was packed is that build.
    expect(isClientBuildFresh()).toBe(true)
    expect(readFileSync(join(project, "node_modules/@author-directory/client/dist/index.js"), "utf8"))
      .toBe(readFileSync(join(PACKAGE, "dist/index.js"), "utf8"))
  })

  it("packs only the build, the README and the licence, at the service's version, depending on effect alone", () => {
    expect(packed.filter((p) => !p.startsWith("dist/types/"))).toEqual(["LICENSE", "README.md", "dist/index.js", "package.json"])
    // The project's licence, word for word, and named in the package's metadata.
    expect(readFileSync(join(project, "node_modules/@author-directory/client/LICENSE"), "utf8")).toBe(readFileSync(join(ROOT, "LICENSE"), "utf8"))
    expect(packed.filter((p) => p.startsWith("dist/types/")).every((p) => p.endsWith(".d.ts"))).toBe(true)
    expect(packed).toContain("dist/types/Client/index.d.ts")
    const service = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }
    const installed = JSON.parse(readFileSync(join(project, "node_modules/@author-directory/client/package.json"), "utf8")) as {
      version: string
      license: string
      dependencies: Record<string, string>
    }
    expect(installed.version).toBe(service.version)
    expect(installed.license).toBe("MIT")
    expect(installed.dependencies).toEqual({ effect: "4.1.0" })
    const modules = readdirSync(join(project, "node_modules"), { withFileTypes: true })
      .filter((e) => !e.name.startsWith("."))
      .flatMap((e) => e.name.startsWith("@") ? readdirSync(join(project, "node_modules", e.name)).map((n) => `${e.name}/${n}`) : [e.name])
    expect(modules.sort()).toEqual(["@author-directory/client", "effect"])
  })

  it("bundles the contracts: its JavaScript imports effect and nothing else, and no Node built-in", () => {
    const bundle = readFileSync(join(project, "node_modules/@author-directory/client/dist/index.js"), "utf8")
    const specifiers = [...bundle.matchAll(/^\s*(?:import|export)\b[^"'`;]*?\bfrom\s*["']([^"']+)["']/gm)].map((m) => m[1]!)
    expect(specifiers.length).toBeGreaterThan(0)
    expect([...new Set(specifiers)].filter((s) => s !== "effect" && !s.startsWith("effect/"))).toEqual([])
    expect(bundle).not.toMatch(/\bimport\s*\(|\brequire\s*\(|["']node:/)
    const declarations = readdirSync(join(project, "node_modules/@author-directory/client/dist/types"), { recursive: true, encoding: "utf8" })
    for (const file of declarations.filter((f) => f.endsWith(".d.ts"))) {
      const text = readFileSync(join(project, "node_modules/@author-directory/client/dist/types", file), "utf8")
      expect(text, file).not.toMatch(/from\s*["']\.\.?\/[^"']+\.ts["']/)
    }
  })

  it("type-checks the program and the README's examples with strict nodenext", async () => {
    const tsc = await run(join(ROOT, "node_modules/.bin/tsc"), ["-p", "."], { cwd: project }).then(
      (r) => r.stdout,
      (e: { stdout?: string; message: string }) => e.stdout ?? e.message
    )
    expect(tsc).toBe("")
  })

  // The same JavaScript on each runtime the package claims, from the same installed tarball: the
  // Node of the tests, the oldest its engines admit, Bun and Deno.
  const runtimes: Record<string, () => Promise<[string, Array<string>]>> = {
    [`node ${process.versions.node}`]: async () => [process.execPath, []],
    [`node ${RUNTIME_VERSIONS.node}`]: async () => [await runtimeBinary("node"), []],
    bun: async () => [await runtimeBinary("bun"), []],
    // Deno asks for network access; nothing else (files it imports are not reads it must be granted).
    deno: async () => [await runtimeBinary("deno"), ["run", "--allow-net=127.0.0.1"]]
  }

  it("the older Node it runs on is the oldest its engines admit", () => {
    const { engines } = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8")) as { engines: { node: string } }
    expect(`${engines.node}.0`).toBe(`>=${RUNTIME_VERSIONS.node}`)
  })

  it.each(Object.keys(runtimes))("runs the program on %s: login, create, 409, /web requests and broadcasts (JSON and protobuf), the Promise facade", async (runtime) => {
    const [command, args] = await runtimes[runtime]!()
    const { stdout, stderr } = await run(command, [...args, "out/program.js", app.url], { cwd: project, timeout: 120_000 })
    expect(stderr).toBe("")
    const lines = stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>)
    const step = (name: string) => lines.filter((l) => l["step"] === name)
    const [created] = step("create") as Array<{ status: number; id: number; name: string }>
    expect(created).toMatchObject({ status: 201, id: expect.any(Number), name: expect.stringMatching(/^Pack \d+$/) })
    expect(step("list")).toEqual([{ step: "list", ids: [created!.id] }])
    expect(step("409")).toEqual([{
      step: "409",
      duplicate: { tag: "AuthorNameTaken", detail: `Author with name ${created!.name} already exists`, isClass: true }
    }])
    const ws = step("ws") as Array<{ format: string; page: unknown; created: { id: number; name: string }; broadcast: unknown }>
    expect(ws.map((w) => w.format)).toEqual(["json", "protobuf"])
    for (const w of ws) {
      expect(w.page).toEqual({ status: 0, per_page: 1, total: expect.any(Number) })
      expect(w.created.name).toBe(`Broadcast ${w.format} ${created!.name.slice("Pack ".length)}`)
      expect(w.broadcast).toEqual({ event: "author.created", id: w.created.id })
    }
    const [facade] = step("facade")
    expect(facade).toMatchObject({
      same: true,
      taken: expect.stringMatching(/^Author with name Facade \d+ already exists$/),
      invalid: ["string_too_short"],
      renamed: expect.stringMatching(/^Facade renamed \d+$/)
    })
    expect(lines.map((l) => l["step"])).toEqual(["create", "list", "409", "ws", "ws", "facade"])
  }, 900_000)

  it("runs the README's examples with plain node: they print what they say", async () => {
    const local = (file: string) => readFileSync(join(project, file), "utf8").replaceAll("http://localhost:8000", app.url)
    writeFileSync(join(project, "out/readme-promise.js"), local("out/readme-promise.js"))
    writeFileSync(join(project, "out/readme-effect.js"), local("out/readme-effect.js"))
    const promise = await run(process.execPath, ["out/readme-promise.js"], { cwd: project, timeout: 60_000 })
    expect(promise.stderr).toBe("")
    expect(promise.stdout.trim().split("\n")).toEqual([
      expect.stringMatching(/^created \d+ Ada Lovelace \d+$/),
      expect.stringMatching(/^409 Author with name Ada Lovelace \d+ already exists$/),
      expect.stringMatching(/^ws 0 \d+$/)
    ])
    const effect = await run(process.execPath, ["out/readme-effect.js"], { cwd: project, timeout: 60_000 })
    expect(effect.stderr).toBe("")
    expect(effect.stdout.trim().split("\n")).toEqual([
      expect.stringMatching(/^authors \d+$/),
      "Author with ID 2000000000 not found"
    ])
  })
})
