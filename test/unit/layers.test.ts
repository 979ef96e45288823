/**
 * The layering rule (scripts/layers.ts, run by `npm run check`): the repository keeps it, and the
 * checker does fail — on an import against the direction, on a cycle (type-only included), on a
 * module no layer names — both over fixture graphs and over a small fixture repository on disk,
 * through the command `npm run layers` runs.
 */
import { execFileSync } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import {
  ARCHITECTURE_PAGE,
  check,
  checkRepository,
  cycles,
  type Graph,
  type Import,
  importGraph,
  parseLayerTable,
  placeModule
} from "../../scripts/layers.ts"

const TABLE = `# Fixture

## Layers

| Layer | Modules | May import | Why |
|---|---|---|---|
| domain | \`src/Domain/\` | — | values |
| services | \`src/Feature/\`, \`src/Other/\` | domain | logic |
| contracts | \`src/*/Api.ts\` | domain | schemas |
| http | \`src/Http/\`, \`src/Feature/Http.ts\` | domain, services, contracts | transport |
| ws | \`src/Ws/\` | domain, services | transport |
`
const layers = parseLayerTable(TABLE)

/** A graph from `from -> to` pairs; every named module is a node. */
const graphOf = (...edges: ReadonlyArray<readonly [string, string]>): Graph => {
  const graph = new Map<string, Array<Import>>()
  for (const [from, to] of edges) {
    graph.set(from, [...(graph.get(from) ?? []), { from, to, line: 1 }])
    if (!graph.has(to)) graph.set(to, [])
  }
  return graph
}

describe("the layer table", () => {
  it("is read from the page: names, modules, what each may import", () => {
    expect(layers.map((l) => l.name)).toEqual(["domain", "services", "contracts", "http", "ws"])
    expect(layers[3]!.modules).toEqual(["src/Http/", "src/Feature/Http.ts"])
    expect([...layers[3]!.mayImport]).toEqual(["domain", "services", "contracts"])
    expect(layers[0]!.mayImport.size).toBe(0)
  })

  it("places a module by its most specific row: a file, then a pattern, then a folder", () => {
    const layerOf = (module: string) => {
      const placement = placeModule(module, layers)
      return placement._tag === "In" ? placement.layer.name : placement._tag
    }
    expect(layerOf("src/Feature/Service.ts")).toBe("services")
    expect(layerOf("src/Feature/Api.ts")).toBe("contracts")
    expect(layerOf("src/Feature/Http.ts")).toBe("http")
    expect(layerOf("src/Domain/Deep/Value.ts")).toBe("domain")
    expect(layerOf("src/Unknown.ts")).toBe("Unlisted")
  })

  it("refuses a row that may import a layer the table does not have", () => {
    expect(() => parseLayerTable(TABLE.replace("| domain, services |", "| domain, servics |"))).toThrow(/unknown layer "servics"/)
  })

  it("refuses a page without the section or with other columns", () => {
    expect(() => parseLayerTable("# Nothing here")).toThrow(/Layers/)
    expect(() => parseLayerTable(TABLE.replace("| May import |", "| Imports |"))).toThrow(/columns/)
  })
})

describe("the check over fixture graphs", () => {
  it("passes imports that run the way the table says", () => {
    const graph = graphOf(
      ["src/Http/Server.ts", "src/Feature/Service.ts"],
      ["src/Http/Server.ts", "src/Feature/Api.ts"],
      ["src/Feature/Service.ts", "src/Domain/Value.ts"],
      ["src/Feature/Api.ts", "src/Domain/Value.ts"],
      ["src/Feature/Service.ts", "src/Other/Helper.ts"]
    )
    expect(check(graph, layers)).toEqual([])
  })

  it("fails on an import against the direction", () => {
    const graph = graphOf(["src/Domain/Value.ts", "src/Feature/Service.ts"])
    expect(check(graph, layers)).toEqual([
      "src/Domain/Value.ts:1: imports src/Feature/Service.ts: layer domain may not import layer services"
    ])
  })

  it("fails when one transport imports the other, and when a contract imports an implementation", () => {
    const graph = graphOf(["src/Ws/Socket.ts", "src/Http/Server.ts"], ["src/Feature/Api.ts", "src/Feature/Service.ts"])
    expect(check(graph, layers)).toEqual([
      "src/Ws/Socket.ts:1: imports src/Http/Server.ts: layer ws may not import layer http",
      "src/Feature/Api.ts:1: imports src/Feature/Service.ts: layer contracts may not import layer services"
    ])
  })

  it("fails on a cycle, even inside one layer", () => {
    const graph = graphOf(
      ["src/Feature/Repo.ts", "src/Feature/Rows.ts"],
      ["src/Feature/Rows.ts", "src/Feature/Repo.ts"],
      ["src/Feature/Service.ts", "src/Feature/Repo.ts"]
    )
    expect(check(graph, layers)).toEqual(["cycle: src/Feature/Repo.ts → src/Feature/Rows.ts → src/Feature/Repo.ts"])
  })

  it("finds every cycle, long ones and a module importing itself", () => {
    const graph = graphOf(
      ["src/Other/A.ts", "src/Other/B.ts"],
      ["src/Other/B.ts", "src/Other/C.ts"],
      ["src/Other/C.ts", "src/Other/A.ts"],
      ["src/Other/D.ts", "src/Other/D.ts"],
      ["src/Other/E.ts", "src/Other/A.ts"]
    )
    expect(cycles(graph)).toEqual([["src/Other/A.ts", "src/Other/B.ts", "src/Other/C.ts"], ["src/Other/D.ts"]])
    expect(check(graph, layers)).toEqual([
      "cycle: src/Other/A.ts → src/Other/B.ts → src/Other/C.ts → src/Other/A.ts",
      "cycle: src/Other/D.ts → src/Other/D.ts"
    ])
  })

  it("fails on a module no layer names, and on one two layers claim equally", () => {
    const ambiguous = parseLayerTable(TABLE.replace("| `src/Ws/` |", "| `src/Ws/`, `src/Http/` |"))
    expect(check(graphOf(["src/Stray.ts", "src/Domain/Value.ts"]), layers)).toEqual([
      "src/Stray.ts: in no layer of the table (docs/architecture.md, \"Layers\")"
    ])
    expect(check(graphOf(["src/Http/Server.ts", "src/Domain/Value.ts"]), ambiguous)).toEqual([
      "src/Http/Server.ts: claimed equally by layers http, ws"
    ])
  })
})

describe("a fixture repository on disk", () => {
  const root = mkdtempSync(join(tmpdir(), "layers-"))
  afterAll(() => rmSync(root, { recursive: true, force: true }))
  const write = (path: string, text: string) => {
    mkdirSync(dirname(join(root, path)), { recursive: true })
    writeFileSync(join(root, path), text)
  }
  write("docs/architecture.md", TABLE)
  write("src/Domain/Value.ts", `// import "../Http/Server.ts" in a comment does not count\nexport const text = 'import("../Ws/Socket.ts")'\n`)
  write("src/Feature/Service.ts", `import { text } from "../Domain/Value.ts"\nimport type { Row } from "./Repo.ts"\nexport const service = (row: Row) => text + row.id\n`)
  write("src/Feature/Repo.ts", `import type { service } from "./Service.ts"\nexport interface Row { readonly id: string }\nexport type S = typeof service\n`)
  write("src/Http/Server.ts", `export * from "../Feature/Service.ts"\nexport { Socket } from "../Ws/Socket.ts"\n`)
  write("src/Ws/Socket.ts", `import { effect } from "effect"\nexport const Socket = () => import("../Http/Server.ts").then(() => effect)\n`)

  it("reads static, type-only, re-exporting and dynamic imports, not comments or strings", () => {
    const graph = importGraph(root)
    const edges = [...graph.values()].flat().map((i) => `${i.from}:${i.line} -> ${i.to}`)
    expect(edges.sort()).toEqual([
      "src/Feature/Repo.ts:1 -> src/Feature/Service.ts",
      "src/Feature/Service.ts:1 -> src/Domain/Value.ts",
      "src/Feature/Service.ts:2 -> src/Feature/Repo.ts",
      "src/Http/Server.ts:1 -> src/Feature/Service.ts",
      "src/Http/Server.ts:2 -> src/Ws/Socket.ts",
      "src/Ws/Socket.ts:2 -> src/Http/Server.ts"
    ])
  })

  it("`node scripts/layers.ts <root>` exits 1 and names each problem", () => {
    let stderr = ""
    let status = 0
    try {
      execFileSync(process.execPath, [join(process.cwd(), "scripts/layers.ts"), root], { encoding: "utf8", stdio: "pipe" })
    } catch (error) {
      const failed = error as { status: number; stderr: string }
      status = failed.status
      stderr = failed.stderr
    }
    expect(status).toBe(1)
    const lines = stderr.split("\n").filter((l) => l !== "")
    expect(lines).toEqual([
      "src/Http/Server.ts:2: imports src/Ws/Socket.ts: layer http may not import layer ws",
      "src/Ws/Socket.ts:2: imports src/Http/Server.ts: layer ws may not import layer http",
      "cycle: src/Feature/Repo.ts → src/Feature/Service.ts → src/Feature/Repo.ts",
      "cycle: src/Http/Server.ts → src/Ws/Socket.ts → src/Http/Server.ts",
      "4 layering problem(s): see docs/architecture.md, \"Layers\""
    ])
  })
})

describe("this repository", () => {
  it("keeps the layering of docs/architecture.md, with no cycle", () => {
    expect(checkRepository()).toEqual([])
  })

  it("keeps the generic HTTP transport apart from the authors feature: an import of it from src/Http/ fails", () => {
    const table = parseLayerTable(readFileSync(ARCHITECTURE_PAGE, "utf8"))
    for (const feature of ["src/Authors/ReadCache.ts", "src/Authors/Reads.ts", "src/Authors/ReadAnswers.ts", "src/Authors/Authors.ts", "src/Authors/Http.ts"]) {
      expect(check(graphOf(["src/Http/FrontDoor.ts", feature]), table), feature).toEqual([
        expect.stringMatching(new RegExp(`^src/Http/FrontDoor\\.ts:1: imports ${feature.replaceAll(".", "\\.")}: layer http may not import layer (features|handlers)$`))
      ])
    }
    // The feature's handlers module hands its stage to the front door, so it may import src/Http/.
    expect(check(graphOf(["src/Authors/Http.ts", "src/Http/FrontDoor.ts"], ["src/Authors/Http.ts", "src/Authors/Reads.ts"]), table)).toEqual([])
  })
})
