/**
 * `npm run layers` (part of `npm run check`): the import graph of `src/` against the layer table of
 * docs/architecture.md ("Layers"). The table is read from the page, so the rule and the page cannot
 * say different things. It fails on
 * - a module of `src/` that no row of the table names, or that two layers claim equally;
 * - an import of a module in a layer the importer's row does not list under "May import"
 *   (a layer may always import itself);
 * - any cycle of imports in `src/` (type-only imports count: a cycle of types is still two modules
 *   that cannot be read apart).
 *
 * Imports are read with TypeScript's own pre-processor (static, `export … from`, dynamic `import()`),
 * so comments and strings do not count.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, relative, resolve, dirname, sep } from "node:path"
import ts from "typescript"

export interface Layer {
  readonly name: string
  /** `src/Domain/` (a folder, at any depth), `src/*\/Api.ts` (`*`: one path segment), `src/Errors.ts`. */
  readonly modules: ReadonlyArray<string>
  readonly mayImport: ReadonlySet<string>
}

export interface Import {
  readonly from: string
  readonly to: string
  readonly line: number
}

/** Module paths are relative to the repository, with `/`: `src/Auth/Api.ts`. */
export type Graph = ReadonlyMap<string, ReadonlyArray<Import>>

// --- the table --------------------------------------------------------------------------------

const cells = (row: string): Array<string> => row.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim())

/** The first table after the `## Layers` heading: Layer | Modules | May import | Why. */
export const parseLayerTable = (markdown: string): Array<Layer> => {
  const lines = markdown.split("\n")
  const heading = lines.findIndex((l) => /^##\s+Layers\s*$/.test(l))
  if (heading < 0) throw new Error("no \"## Layers\" section")
  const start = lines.findIndex((l, i) => i > heading && l.trimStart().startsWith("|"))
  if (start < 0) throw new Error("no table in the \"Layers\" section")
  const header = cells(lines[start]!).map((c) => c.toLowerCase())
  const expected = ["layer", "modules", "may import", "why"]
  if (expected.some((name, i) => header[i] !== name)) {
    throw new Error(`the Layers table's columns are ${JSON.stringify(header)}, expected ${JSON.stringify(expected)}`)
  }
  const layers: Array<Layer> = []
  for (let i = start + 2; i < lines.length && lines[i]!.trimStart().startsWith("|"); i++) {
    const [name = "", modules = "", mayImport = ""] = cells(lines[i]!)
    layers.push({
      name: name.replaceAll("*", "").replaceAll("`", ""),
      modules: [...modules.matchAll(/`([^`]+)`/g)].map((m) => m[1]!),
      mayImport: new Set(mayImport.split(",").map((s) => s.trim()).filter((s) => s !== "" && s !== "—" && s !== "-"))
    })
  }
  const names = new Set(layers.map((l) => l.name))
  for (const layer of layers) {
    if (layer.modules.length === 0) throw new Error(`layer ${layer.name} names no modules`)
    for (const other of layer.mayImport) if (!names.has(other)) throw new Error(`layer ${layer.name} may import an unknown layer "${other}"`)
  }
  return layers
}

// --- which layer a module is in ------------------------------------------------------------------

/** How specific a pattern's match is (0: no match): a file beats a `*` pattern beats a folder; deeper beats shallower. */
const matchStrength = (pattern: string, module: string): number => {
  const depth = pattern.split("/").length
  if (pattern.endsWith("/")) return module.startsWith(pattern) ? 100 + depth : 0
  if (!pattern.includes("*")) return pattern === module ? 300 + depth : 0
  const regex = new RegExp(`^${pattern.split("*").map((p) => p.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join("[^/]+")}$`)
  return regex.test(module) ? 200 + depth : 0
}

export type Placement =
  | { readonly _tag: "In"; readonly layer: Layer }
  | { readonly _tag: "Unlisted" }
  | { readonly _tag: "Ambiguous"; readonly layers: ReadonlyArray<string> }

export const placeModule = (module: string, layers: ReadonlyArray<Layer>): Placement => {
  let best = 0
  let found: Array<Layer> = []
  for (const layer of layers) {
    const strength = Math.max(0, ...layer.modules.map((p) => matchStrength(p, module)))
    if (strength === 0 || strength < best) continue
    if (strength > best) found = []
    best = strength
    found.push(layer)
  }
  if (found.length === 0) return { _tag: "Unlisted" }
  if (found.length > 1) return { _tag: "Ambiguous", layers: found.map((l) => l.name) }
  return { _tag: "In", layer: found[0]! }
}

// --- the graph -----------------------------------------------------------------------------------

const modulesUnder = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    return entry.isDirectory() ? modulesUnder(path) : entry.name.endsWith(".ts") ? [path] : []
  })

const posix = (path: string) => path.split(sep).join("/")

/** Every import between modules of `src/` (packages and Node's modules are not layers). */
export const importGraph = (root: string): Graph => {
  const graph = new Map<string, Array<Import>>()
  for (const file of modulesUnder(join(root, "src")).sort()) {
    const text = readFileSync(file, "utf8")
    const from = posix(relative(root, file))
    const imports: Array<Import> = []
    for (const { fileName, pos } of ts.preProcessFile(text, true, true).importedFiles) {
      if (!fileName.startsWith(".")) continue
      const to = posix(relative(root, resolve(dirname(file), fileName)))
      imports.push({ from, to, line: text.slice(0, pos).split("\n").length })
    }
    graph.set(from, imports)
  }
  return graph
}

// --- the check -----------------------------------------------------------------------------------

/** Strongly connected components of more than one module, or a module importing itself (Tarjan). */
export const cycles = (graph: Graph): Array<Array<string>> => {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const found: Array<Array<string>> = []
  let next = 0
  const visit = (node: string) => {
    index.set(node, next)
    low.set(node, next)
    next++
    stack.push(node)
    onStack.add(node)
    for (const { to } of graph.get(node) ?? []) {
      if (!graph.has(to)) continue
      if (!index.has(to)) {
        visit(to)
        low.set(node, Math.min(low.get(node)!, low.get(to)!))
      } else if (onStack.has(to)) {
        low.set(node, Math.min(low.get(node)!, index.get(to)!))
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: Array<string> = []
      let member: string
      do {
        member = stack.pop()!
        onStack.delete(member)
        component.push(member)
      } while (member !== node)
      const selfImport = (graph.get(node) ?? []).some((i) => i.to === node)
      if (component.length > 1 || selfImport) found.push(component.sort())
    }
  }
  for (const node of graph.keys()) if (!index.has(node)) visit(node)
  return found
}

/** One path around a cycle, for the message: `a → b → a`. */
const cyclePath = (graph: Graph, component: ReadonlyArray<string>): Array<string> => {
  const members = new Set(component)
  const start = component[0]!
  const previous = new Map<string, string>()
  const queue = [start]
  while (queue.length > 0) {
    const node = queue.shift()!
    for (const { to } of graph.get(node) ?? []) {
      if (!members.has(to)) continue
      if (to === start) {
        const path = [start]
        for (let at: string | undefined = node; at !== undefined && at !== start; at = previous.get(at)) path.splice(1, 0, at)
        return [...path, start]
      }
      if (!previous.has(to)) {
        previous.set(to, node)
        queue.push(to)
      }
    }
  }
  return [...component, start]
}

export const check = (graph: Graph, layers: ReadonlyArray<Layer>): Array<string> => {
  const problems: Array<string> = []
  const placed = new Map<string, Layer>()
  for (const module of graph.keys()) {
    const placement = placeModule(module, layers)
    if (placement._tag === "In") placed.set(module, placement.layer)
    else if (placement._tag === "Unlisted") problems.push(`${module}: in no layer of the table (docs/architecture.md, "Layers")`)
    else problems.push(`${module}: claimed equally by layers ${placement.layers.join(", ")}`)
  }
  for (const imports of graph.values()) {
    for (const { from, to, line } of imports) {
      if (!graph.has(to)) {
        problems.push(`${from}:${line}: imports ${to}, which is not a module of src/`)
        continue
      }
      const a = placed.get(from)
      const b = placed.get(to)
      if (a === undefined || b === undefined || a === b || a.mayImport.has(b.name)) continue
      problems.push(`${from}:${line}: imports ${to}: layer ${a.name} may not import layer ${b.name}`)
    }
  }
  for (const component of cycles(graph)) problems.push(`cycle: ${cyclePath(graph, component).join(" → ")}`)
  return problems
}

export const ROOT = join(import.meta.dirname, "..")
export const ARCHITECTURE_PAGE = join(ROOT, "docs", "architecture.md")

export const checkRepository = (root: string = ROOT): Array<string> =>
  check(importGraph(root), parseLayerTable(readFileSync(join(root, "docs", "architecture.md"), "utf8")))

// `node scripts/layers.ts [root]`: the repository this script is in, or another (the tests' fixtures).
if (import.meta.main) {
  const problems = checkRepository(process.argv[2] === undefined ? ROOT : resolve(process.argv[2]))
  for (const problem of problems) console.error(problem)
  if (problems.length > 0) {
    console.error(`\n${problems.length} layering problem(s): see docs/architecture.md, "Layers"`)
    process.exit(1)
  }
}
