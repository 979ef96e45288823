/**
 * The client kit (`src/Client/index.ts`, built into packages/client) loads no server code: importing it
 * in a fresh Node process resolves no module of the server's packages (prom-client would start
 * collecting default metrics in the client's process; jose, the PostgreSQL and Redis drivers,
 * tracing) and, of `src/`, only contracts, the domain vocabulary, the error table and the client
 * itself (the layers the client's row of docs/architecture.md allows).
 *
 * Every resolution is recorded by a `module.registerHooks` hook (it sees `import` and `require`
 * alike, inside packages too), installed before the client is imported.
 */
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { describe, expect, it } from "vitest"
import { ARCHITECTURE_PAGE, parseLayerTable, placeModule } from "../../scripts/layers.ts"

const ROOT = process.cwd()

const PROBE = `
import { registerHooks } from "node:module"
const resolved = []
registerHooks({
  resolve(specifier, context, nextResolve) {
    const result = nextResolve(specifier, context)
    resolved.push({ specifier, url: result.url, parent: context.parentURL ?? null })
    return result
  }
})
await import(process.argv[1])
process.stdout.write(JSON.stringify(resolved))
`

interface Resolution {
  readonly specifier: string
  readonly url: string
  readonly parent: string | null
}

const resolved: ReadonlyArray<Resolution> = JSON.parse(
  execFileSync(process.execPath, ["--input-type=module", "-e", PROBE, join(ROOT, "src/Client/index.ts")], { encoding: "utf8" })
)

/** The package a resolved URL is in (`@scope/name` or `name`), if any. */
const packageOf = (url: string): string | undefined => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1]
const SRC = pathToFileURL(join(ROOT, "src")).href + "/"
const srcModule = (url: string): string | undefined => (url.startsWith(SRC) ? `src/${url.slice(SRC.length)}` : undefined)

describe("the client kit's import closure", () => {
  it("is recorded (the probe sees the client and its packages)", () => {
    expect(resolved.map((r) => srcModule(r.url))).toContain("src/Client/index.ts")
    expect(resolved.some((r) => packageOf(r.url) === "effect")).toBe(true)
  })

  it("loads none of the server's packages", () => {
    const packages = new Set(resolved.flatMap((r) => packageOf(r.url) ?? []))
    const server = [
      "prom-client", "jose", "pg", "pg-pool", "pg-protocol", "@effect/sql-pg", "ioredis", "@electric-sql/pglite",
      "@electric-sql/pglite-socket", "@effect/platform-node", "@effect/opentelemetry", "redoc"
    ]
    expect(server.filter((name) => packages.has(name))).toEqual([])
    expect([...packages].filter((name) => name.startsWith("@opentelemetry/"))).toEqual([])
  })

  it("loads, of src/, only contracts, the domain, the error table and the client", () => {
    const layers = parseLayerTable(readFileSync(ARCHITECTURE_PAGE, "utf8"))
    const client = layers.find((l) => l.name === "client")!
    const allowed = new Set([client.name, ...client.mayImport])
    const loaded = [...new Set(resolved.flatMap((r) => srcModule(r.url) ?? []))]
    const outside = loaded.filter((module) => {
      const placement = placeModule(module, layers)
      return placement._tag !== "In" || !allowed.has(placement.layer.name)
    })
    expect(outside).toEqual([])
    expect(loaded.filter((m) => m.startsWith("src/Observability/") && m !== "src/Observability/Api.ts")).toEqual([])
    expect(loaded.filter((m) => /^src\/(Ws\/(Server|Connection|Handshake|Dispatch)|Http\/)/.test(m))).toEqual([])
  })

  it("loads no package but effect and no Node built-in: it runs wherever the standard globals are", () => {
    // The /web client is on the standard WebSocket, the protobuf messages on Ws/ProtobufCodec.ts
    // (no protobufjs, no file read), ids from globalThis.crypto: a browser has no `node:` modules.
    expect([...new Set(resolved.flatMap((r) => packageOf(r.url) ?? []))]).toEqual(["effect"])
    expect(resolved.filter((r) => r.url.startsWith("node:")).map((r) => `${r.url} from ${r.parent}`)).toEqual([])
    expect(resolved.map((r) => srcModule(r.url))).not.toContain("src/Ws/Protobuf.ts")
  })
})
