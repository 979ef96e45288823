/**
 * Comments and tests cite the repository's own pages or nothing: no section of a document outside
 * the repository, no review id, no shared notes — a reader of the code has docs/ and nothing else.
 * And every `docs/<page>.md#anchor` the code cites names a page and a heading that exist, so a
 * renamed heading shows up here rather than as a dead reference. The patterns are written so that
 * this file does not match them itself.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import { describe, expect, it } from "vitest"

const ROOT = join(import.meta.dirname, "..", "..")
const FOLDERS = ["src", "test", "bench", "scripts", "migrations", "proto", ".ci", "config"]
const TEXT = /\.(ts|js|mjs|sql|proto|json|md|sh|ya?ml)$|^run$/

/** Every text file under the folders, as [path relative to the root, its lines]. */
const files = (): ReadonlyArray<readonly [string, ReadonlyArray<string>]> => {
  const found: Array<readonly [string, ReadonlyArray<string>]> = []
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      if (name === "node_modules" || name === "dist") continue
      const path = join(dir, name)
      if (statSync(path).isDirectory()) walk(path)
      else if (TEXT.test(name)) found.push([relative(ROOT, path), readFileSync(path, "utf8").split("\n")])
    }
  }
  for (const folder of FOLDERS) if (existsSync(join(ROOT, folder))) walk(join(ROOT, folder))
  return found
}

/** What no comment or test may cite: sections of documents outside the repository, review ids. */
const OUTSIDE: ReadonlyArray<RegExp> = [
  /\bCONTRACT \u00a7/,
  /\bINTERFACE \u00a7/,
  /\.\.\/shared\//,
  /\b[Rr]eview F\d/,
  /STACK-NOTE[S]/,
  /\bARCHITECTURE (\u00a7|habit)/
]

/** GitHub's anchor of a heading (as test/examples/readme.test.ts computes it for the pages' links). */
const slug = (heading: string) => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-")

const anchorsOf = (page: string): ReadonlySet<string> =>
  new Set([...readFileSync(join(ROOT, page), "utf8").matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1]!)))

describe("citations in code, tests, benchmarks and scripts", () => {
  const all = files()

  it("scans the source and the tests (this file among them)", () => {
    const paths = all.map(([path]) => path)
    expect(paths).toContain("src/main.ts")
    expect(paths).toContain(join("test", "unit", "citations.test.ts"))
  })

  it("cite no document outside the repository and no review id", () => {
    const found: Array<string> = []
    for (const [path, lines] of all) {
      lines.forEach((line, i) => {
        if (OUTSIDE.some((pattern) => pattern.test(line))) found.push(`${path}:${i + 1}: ${line.trim()}`)
      })
    }
    expect(found).toEqual([])
  })

  it("cite docs pages and anchors that exist", () => {
    const anchors = new Map<string, ReadonlySet<string>>()
    const broken: Array<string> = []
    for (const [path, lines] of all) {
      lines.forEach((line, i) => {
        for (const m of line.matchAll(/(?<![\w/.-])(docs\/[\w-]+\.md)(?:#([\w-]+))?/g)) {
          const [, page = "", anchor] = m
          if (!existsSync(join(ROOT, page))) {
            broken.push(`${path}:${i + 1}: ${m[0]}`)
            continue
          }
          if (anchor === undefined) continue
          if (!anchors.has(page)) anchors.set(page, anchorsOf(page))
          if (!anchors.get(page)!.has(anchor)) broken.push(`${path}:${i + 1}: ${m[0]}`)
        }
      })
    }
    expect(broken).toEqual([])
  })
})
