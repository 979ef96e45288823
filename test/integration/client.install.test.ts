/**
 * The client kit's install steps (packages/client/README.md#install, the same lines as the
 * README's), run literally on a fresh clone of this checkout's HEAD: every line of the block in one
 * shell, as a reader pastes them, each step's outcome asserted (`npm ci` takes what it can from the
 * npm cache). Then `npm pack` in packages/client, the README's alternative, where nothing is built
 * (its `prepack` builds the kit, from that directory); then the package README's first example,
 * type-checked strictly in the new project and run with node against a running service.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { packageReadmeBlock, writeConsumerTsconfig } from "../support/ClientKit.ts"
import { commandsOf, startShell, type Step } from "../support/Shell.ts"
import { startTestApp } from "../support/TestApp.ts"

const ROOT = process.cwd()
const VERSION = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version
const TARBALL = `author-directory-client-${VERSION}.tgz`

/** What a reader's shell has: no variable of the test run; npm quiet, and the cache used first. */
const ENV = {
  PATH: process.env["PATH"] ?? "",
  HOME: process.env["HOME"] ?? "",
  npm_config_prefer_offline: "true",
  npm_config_audit: "false",
  npm_config_fund: "false",
  npm_config_update_notifier: "false"
}

const git = (cwd: string, ...args: Array<string>) => execFileSync("git", args, { cwd, encoding: "utf8" }).trim()
const tarList = (tarball: string) => execFileSync("tar", ["-tzf", tarball], { encoding: "utf8" }).split("\n").filter((l) => l !== "").sort()
const tarFile = (tarball: string, path: string) => execFileSync("tar", ["-xzOf", tarball, `package/${path}`], { encoding: "utf8" })

describe("the client kit installed as its README says, from a fresh clone", () => {
  let work: string
  let clone: string
  let project: string
  let shell: ReturnType<typeof startShell>

  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), "ads-client-install-"))
    clone = join(work, "author-directory-service")
    project = join(work, "my-app")
    // A clone of what is committed here (HEAD), sharing this repository's objects: cheap, and
    // nothing built or installed in it.
    git(work, "clone", "--quiet", "--shared", "--no-checkout", ROOT, clone)
    git(clone, "checkout", "--quiet", "--detach", git(ROOT, "rev-parse", "HEAD"))
    expect(existsSync(join(clone, "node_modules"))).toBe(false)
    expect(existsSync(join(clone, "packages/client/dist"))).toBe(false)
    shell = startShell(clone, ENV)
  })

  afterAll(() => {
    shell?.close()
    if (work !== undefined) rmSync(work, { recursive: true, force: true })
  })

  it("the README's install lines, one by one: each succeeds and leaves what it says", async () => {
    // Each line of the block, by what it starts with, and what must hold after it.
    const outcomes: Array<[RegExp, (step: Step) => void | Promise<void>]> = [
      [/^npm ci$/, () => {
        expect(existsSync(join(clone, "node_modules/.bin/tsc"))).toBe(true)
        expect(existsSync(join(clone, "packages/client/dist"))).toBe(false)
      }],
      [/^npm run build:client$/, (step) => {
        expect(step.stderr).toMatch(/built packages\/client\/dist from \d+ modules/)
        expect(existsSync(join(clone, "packages/client/dist/index.js"))).toBe(true)
      }],
      [/^npm pack --workspace packages\/client$/, (step) => {
        expect(step.output.trim().split("\n").at(-1)).toBe(TARBALL)
        expect(existsSync(join(clone, TARBALL))).toBe(true)
      }],
      [/^KIT=/, async (step) => {
        expect(step.output).toBe("")
        expect((await shell.run("", `printf '%s' "$KIT"`)).output).toBe(join(clone, TARBALL))
      }],
      [/^mkdir \.\.\/my-app && cd \.\.\/my-app$/, async () => {
        expect((await shell.run("", "pwd")).output.trim()).toBe(project)
        expect(readdirSync(project)).toEqual([])
      }],
      [/^npm init -y && npm pkg set type=module$/, () => {
        expect(JSON.parse(readFileSync(join(project, "package.json"), "utf8"))).toMatchObject({ name: "my-app", type: "module" })
      }],
      [/^npm install "\$KIT"$/, () => {
        const installed = JSON.parse(readFileSync(join(project, "node_modules/@author-directory/client/package.json"), "utf8")) as Record<string, unknown>
        expect(installed).toMatchObject({ name: "@author-directory/client", version: VERSION, license: "MIT", dependencies: { effect: expect.any(String) } })
        expect(readdirSync(join(project, "node_modules")).filter((n) => !n.startsWith(".")).sort()).toEqual(["@author-directory", "effect"])
        expect(JSON.parse(readFileSync(join(project, "package.json"), "utf8"))).toMatchObject({
          dependencies: { "@author-directory/client": expect.stringContaining(TARBALL) }
        })
      }]
    ]
    const commands = commandsOf(packageReadmeBlock("sh", "install"))
    expect(commands.map((c) => outcomes.filter(([pattern]) => pattern.test(c.text)).length), commands.map((c) => c.text).join(" / "))
      .toEqual(commands.map(() => 1))
    for (const { label, text } of commands) {
      const step = await shell.run(label, text)
      expect({ command: text, status: step.status }, step.output + step.stderr).toEqual({ command: text, status: 0 })
      await outcomes.find(([pattern]) => pattern.test(text))![1](step)
    }
  }, 900_000)

  it("`npm pack` in packages/client, where nothing is built, builds the kit and packs the same tarball", async () => {
    rmSync(join(clone, "packages/client/dist"), { recursive: true, force: true })
    const alternative = join(work, "alternative")
    const step = await shell.run("", `cd ${join(clone, "packages/client")} && npm pack --pack-destination ${work} && mv ${join(work, TARBALL)} ${alternative}.tgz`)
    expect({ status: step.status }, step.output + step.stderr).toEqual({ status: 0 })
    expect(step.stderr).toMatch(/built packages\/client\/dist from \d+ modules/)
    expect(tarList(`${alternative}.tgz`)).toEqual(tarList(join(clone, TARBALL)))
    expect(tarFile(`${alternative}.tgz`, "dist/index.js")).toBe(tarFile(join(clone, TARBALL), "dist/index.js"))
  }, 600_000)

  it("the package README's first example type-checks strictly in the new project and prints what it says against the service", async () => {
    writeConsumerTsconfig(project, ["first.ts"])
    writeFileSync(join(project, "first.ts"), packageReadmeBlock("ts", "promise"))
    const tsc = await shell.run("", `cd ${project} && ${join(clone, "node_modules/.bin/tsc")} -p .`)
    expect({ status: tsc.status, output: tsc.output }).toEqual({ status: 0, output: "" })

    const app = await startTestApp()
    try {
      const compiled = join(project, "out/first.js")
      writeFileSync(compiled, readFileSync(compiled, "utf8").replaceAll("http://localhost:8000", app.url))
      for (const round of [1, 2]) {
        const run = await shell.run("", `node out/first.js`)
        expect({ round, status: run.status, stderr: run.stderr }).toEqual({ round, status: 0, stderr: "" })
        expect(run.output.trim().split("\n")).toEqual([
          expect.stringMatching(/^created \d+ Ada Lovelace \d+$/),
          expect.stringMatching(/^409 Author with name Ada Lovelace \d+ already exists$/),
          expect.stringMatching(/^ws 0 \d+$/)
        ])
      }
    } finally {
      await app.close()
    }
  }, 300_000)
})
