import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { toJavaScript } from "../../scripts/build.ts"

const sources = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [])

describe("npm run build (scripts/build.ts)", () => {
  it("strips the types and points relative .ts specifiers at the built .js, leaving packages alone", () => {
    const out = toJavaScript([
      `import type { A } from "./a.ts"`,
      `import { b } from "./b.ts"`,
      `import "../side-effect.ts"`,
      `export * from './c.ts'`,
      `export { d } from "../d/d.ts"`,
      `const e = await import("./e.ts")`,
      `import { Effect } from "effect"`,
      `import pkg from "some-package/file.ts"`,
      `const x: number = 1 as number`
    ].join("\n"))
    expect(out.split("\n")).toEqual([
      expect.stringMatching(/^\s*$/),
      `import { b } from "./b.js"`,
      `import "../side-effect.js"`,
      `export * from './c.js'`,
      `export { d } from "../d/d.js"`,
      `const e = await import("./e.js")`,
      `import { Effect } from "effect"`,
      `import pkg from "some-package/file.ts"`,
      expect.stringMatching(/^const x\s+= 1\s*$/)
    ])
  })

  it("keeps every line of every source module where it was, so stack traces name the .ts lines", () => {
    for (const file of sources("src")) {
      const source = readFileSync(file, "utf8")
      const built = toJavaScript(source)
      expect(built.split("\n").length, file).toBe(source.split("\n").length)
      expect(built, file).not.toMatch(/from\s*["']\.\.?\/[^"']+\.ts["']/)
    }
  })
})
