/**
 * What the client kit's tests share: the package README's labelled blocks, and the TypeScript
 * configuration of a consumer's project — strict, nodenext, the DOM library and no Node types
 * (what the package's declarations need from a consumer), the declarations checked too.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"

export const CLIENT_PACKAGE = join(process.cwd(), "packages", "client")

/** The package README's fenced block ```<lang> example=<name>. */
export const packageReadmeBlock = (lang: string, name: string): string => {
  const match = new RegExp("```" + lang + " example=" + name + "\\n([\\s\\S]*?)\\n```").exec(readFileSync(join(CLIENT_PACKAGE, "README.md"), "utf8"))
  if (match === null) throw new Error(`packages/client/README.md has no block example=${name}`)
  return match[1]!
}

/** A consumer's tsconfig.json in `project`, compiling `include` into `out/`. */
export const writeConsumerTsconfig = (project: string, include: ReadonlyArray<string>) =>
  writeFileSync(join(project, "tsconfig.json"), JSON.stringify({
    compilerOptions: {
      target: "ES2022",
      lib: ["ES2024", "DOM"],
      types: [],
      module: "NodeNext",
      moduleResolution: "NodeNext",
      strict: true,
      exactOptionalPropertyTypes: true,
      noUncheckedIndexedAccess: true,
      skipLibCheck: false,
      outDir: "out"
    },
    include
  }))
