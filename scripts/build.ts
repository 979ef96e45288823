/**
 * `npm run build` (and `npm start`, through `prestart`, when `src/` changed since the last build):
 * `src/**\/*.ts` → `dist/**\/*.js` with Node's own type stripping, so production runs plain
 * JavaScript. Running the `.ts` files directly works too (`npm run dev`, the tests), but then every
 * process loads Node's TypeScript stripper (a WebAssembly build of SWC): about 40 MB more resident
 * memory and a slower start (docs/performance.md).
 *
 * Types are replaced by spaces, so every line and column of `dist/` is the line and column of the
 * source: stack traces point at the `.ts` file's lines without source maps. Relative `.ts` import
 * specifiers become `.js`, as TypeScript's `rewriteRelativeImportExtensions` would. `dist/` keeps
 * the depth of `src/`, so paths relative to a module (`../../proto/`) resolve the same from both.
 *
 * Needs no dev dependency (`npm ci --omit=dev && npm start` works). The new tree is written beside
 * `dist/` and swapped in whole, so an interrupted build never leaves a half-built one.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { stripTypeScriptTypes } from "node:module"
import { dirname, join, relative } from "node:path"

const root = join(import.meta.dirname, "..")
const src = join(root, "src")
const dist = join(root, "dist")
const stamp = join(dist, ".built")

/** Every file and directory under `dir` (a deleted file changes its directory's mtime). */
const walk = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    return entry.isDirectory() ? [path, ...walk(path)] : [path]
  })

const newestSource = () =>
  Math.max(...[src, import.meta.filename, ...walk(src)].map((path) => statSync(path).mtimeMs))

const isFresh = () => {
  try {
    return statSync(stamp).mtimeMs >= newestSource()
  } catch {
    return false
  }
}

/** `from "./x.ts"`, `import "./x.ts"`, `import("./x.ts")` → `.js`; package specifiers untouched. */
const RELATIVE_TS = /(\bfrom\s*|\bimport\s*\(?\s*)(["'])(\.\.?\/[^"'\n]+)\.ts\2/g

export const toJavaScript = (source: string): string =>
  stripTypeScriptTypes(source, { mode: "strip" }).replace(RELATIVE_TS, "$1$2$3.js$2")

/** Every `.ts` file under `from` as `.js` under `to` (same relative paths); returns how many. */
export const stripTree = (from: string, to: string) => {
  let count = 0
  for (const path of walk(from)) {
    if (!path.endsWith(".ts")) continue
    const target = join(to, relative(from, path)).replace(/\.ts$/, ".js")
    mkdirSync(dirname(target), { recursive: true })
    writeFileSync(target, toJavaScript(readFileSync(path, "utf8")))
    count++
  }
  return count
}

const build = () => {
  const staging = `${dist}.tmp-${process.pid}`
  rmSync(staging, { recursive: true, force: true })
  const count = stripTree(src, staging)
  writeFileSync(join(staging, ".built"), `${new Date().toISOString()}\n`)
  rmSync(dist, { recursive: true, force: true })
  try {
    renameSync(staging, dist)
  } catch (error) {
    // Another build (a parallel test run) swapped its tree in first: it built the same sources.
    rmSync(staging, { recursive: true, force: true })
    if (!isFresh()) throw error
  }
  return count
}

/** Builds `dist/` unless it is newer than every source; returns whether it built. */
export const buildIfNeeded = () => (isFresh() ? false : (build(), true))

if (process.argv[1] === import.meta.filename && !(process.argv.includes("--if-needed") && isFresh())) {
  const started = performance.now()
  const count = build()
  console.error(`built ${count} modules into dist/ in ${Math.round(performance.now() - started)} ms`)
}
