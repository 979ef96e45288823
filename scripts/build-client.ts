/**
 * `npm run build:client`: the client kit (`src/Client/index.ts` and the contracts it imports) →
 * `packages/client/dist/`, the package `@author-directory/client`:
 * - `index.js`: one ES module bundled by esbuild, `effect` left as an import (the package's only
 *   dependency), no Node built-in: the same file runs in browsers, Node, Deno and Bun;
 * - `types/**\/*.d.ts`: declarations emitted by TypeScript from the same sources (the layout of
 *   `src/`, relative specifiers `.js`), checked against the DOM library without Node's types.
 *
 * The contracts are compiled from `src/`, never copied, so the package cannot disagree with the
 * service it was built with. `dist/` is not committed: the test run builds it when a source is
 * newer (test/support/globalSetup.ts), and `npm pack` builds it (the package's `prepack`).
 * The new tree is written beside `dist/` and swapped in whole, as scripts/build.ts does.
 */
import { build as esbuild } from "esbuild"
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import ts from "typescript"

const root = join(import.meta.dirname, "..")
const src = join(root, "src")
export const CLIENT_PACKAGE = join(root, "packages", "client")
const dist = join(CLIENT_PACKAGE, "dist")
const stamp = join(dist, ".built")
const entry = join(src, "Client", "index.ts")
const tsconfig = join(CLIENT_PACKAGE, "tsconfig.json")

const walk = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    return entry.isDirectory() ? [path, ...walk(path)] : [path]
  })

const inputs = () => [src, ...walk(src), import.meta.filename, tsconfig, join(CLIENT_PACKAGE, "package.json")]
const newestInput = () => Math.max(...inputs().map((path) => statSync(path).mtimeMs))

const isFresh = () => {
  try {
    return statSync(stamp).mtimeMs >= newestInput()
  } catch {
    return false
  }
}

/** `from "./x.ts"` / `import("../x.ts")` → `.js`: what a published declaration file names. */
const RELATIVE_TS = /(\bfrom\s*|\bimport\s*\(\s*)(["'])(\.\.?\/[^"'\n]+)\.ts\2/g

const declarations = (outDir: string) => {
  const parsed = ts.getParsedCommandLineOfConfigFile(tsconfig, { outDir }, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"))
    }
  })
  if (parsed === undefined) throw new Error(`cannot read ${tsconfig}`)
  const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options })
  const diagnostics = ts.getPreEmitDiagnostics(program)
  if (diagnostics.length > 0) {
    const host = { getCanonicalFileName: (f: string) => f, getCurrentDirectory: () => root, getNewLine: () => "\n" }
    throw new Error(`the client kit does not type-check for the package:\n${ts.formatDiagnostics(diagnostics, host)}`)
  }
  const result = program.emit(undefined, (path, text) => {
    mkdirSync(dirname(path), { recursive: true })
    writeFileSync(path, text.replace(RELATIVE_TS, "$1$2$3.js$2"))
  }, undefined, true)
  if (result.emitSkipped) throw new Error("declaration emit skipped")
}

const bundle = async (outfile: string) => {
  const { version } = JSON.parse(readFileSync(join(CLIENT_PACKAGE, "package.json"), "utf8")) as { version: string }
  const result = await esbuild({
    entryPoints: [entry],
    outfile,
    // The metafile's inputs are relative to this directory: the root, wherever the build is run
    // from (`npm pack` runs it from packages/client).
    absWorkingDir: root,
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["effect", "effect/*"],
    // Readable output: stack traces a client developer can follow without source maps.
    minify: false,
    legalComments: "none",
    charset: "utf8",
    metafile: true,
    logLevel: "silent",
    banner: { js: `// @author-directory/client ${version}: built by scripts/build-client.ts from the service's src/. Do not edit.` }
  })
  // Only our sources go in: a package import anywhere but effect is a dependency the package does not declare.
  const outside = Object.keys(result.metafile.inputs).filter((input) => !join(root, input).startsWith(src + "/"))
  if (outside.length > 0) throw new Error(`the bundle would include modules outside src/: ${outside.join(", ")}`)
  return Object.keys(result.metafile.inputs).length
}

export const buildClient = async () => {
  const staging = `${dist}.tmp-${process.pid}`
  rmSync(staging, { recursive: true, force: true })
  mkdirSync(staging, { recursive: true })
  try {
    const modules = await bundle(join(staging, "index.js"))
    declarations(join(staging, "types"))
    writeFileSync(join(staging, ".built"), `${new Date().toISOString()}\n`)
    rmSync(dist, { recursive: true, force: true })
    try {
      renameSync(staging, dist)
    } catch (error) {
      // Another build swapped its tree in first: it built the same sources.
      if (!isFresh()) throw error
    }
    return modules
  } finally {
    rmSync(staging, { recursive: true, force: true })
  }
}

/** Whether `dist/` was built after the last change to any source of the package. */
export const isClientBuildFresh = isFresh

/** Builds the package unless its `dist/` is newer than every source; returns whether it built. */
export const buildClientIfNeeded = async () => (isFresh() ? false : (await buildClient(), true))

if (process.argv[1] === import.meta.filename && !(process.argv.includes("--if-needed") && isFresh())) {
  const started = performance.now()
  const modules = await buildClient()
  console.error(`built ${relative(root, dist)} from ${modules} modules in ${Math.round(performance.now() - started)} ms`)
}
