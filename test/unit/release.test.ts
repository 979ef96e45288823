/**
 * One version for the release (docs/deployment.md#the-image): package.json's. Every artefact that
 * names a version derives from it or says the same — the client kit's package, the lockfile, the
 * image tag that deploy/kubernetes/, docker-compose.yml and the docs run, the
 * `app.kubernetes.io/version` labels, `app_info{version}`, the OpenAPI and AsyncAPI documents, the
 * client-kit tarball the READMEs install — and the CHANGELOG's newest release is that version.
 */
import { OpenApi } from "effect/http-api"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { parse, parseAllDocuments } from "yaml"
import { Api } from "../../src/Api.ts"
import { appVersion, registry, setAppInfo } from "../../src/Observability/Metrics.ts"
import { asyncApiDocument } from "../../src/Ws/Http.ts"

type Json = Record<string, unknown>
const readJson = (path: string) => JSON.parse(readFileSync(path, "utf8")) as Json
const at = (value: unknown, ...path: Array<string | number>): unknown =>
  path.reduce<unknown>((v, k) => (v as Record<string | number, unknown> | undefined)?.[k], value)

const VERSION = String(readJson("package.json")["version"])

const walk = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]))

/** The files that name the image or the kit's tarball by version. */
const NAMING_FILES = [
  "README.md",
  "packages/client/README.md",
  "docker-compose.yml",
  ...readdirSync("docs").filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`),
  ...walk("deploy/kubernetes").filter((f) => /\.ya?ml$/.test(f))
]

describe("one version for the release", () => {
  it("is a semantic version", () => {
    expect(VERSION).toMatch(/^\d+\.\d+\.\d+$/)
  })

  it("the client kit's package and the lockfile carry it", () => {
    expect(readJson("packages/client/package.json")["version"]).toBe(VERSION)
    const lock = readJson("package-lock.json")
    expect(at(lock, "version")).toBe(VERSION)
    expect(at(lock, "packages", "", "version")).toBe(VERSION)
    expect(at(lock, "packages", "packages/client", "version")).toBe(VERSION)
  })

  it("the CHANGELOG's newest release is it (an Unreleased section may sit above it, never another version)", () => {
    const headings = [...readFileSync("CHANGELOG.md", "utf8").matchAll(/^## (.+)$/gm)].map((m) => m[1]!)
    const releases = headings.filter((h) => h !== "Unreleased")
    expect(headings.indexOf("Unreleased")).toBeLessThanOrEqual(0)
    expect(releases[0]).toMatch(new RegExp(`^${VERSION.replaceAll(".", "\\.")} — `))
  })

  it("app_info{version}, the OpenAPI and the AsyncAPI documents report it", async () => {
    expect(appVersion).toBe(VERSION)
    setAppInfo("test")
    expect(await registry.getSingleMetricAsString("app_info")).toContain(`version="${VERSION}"`)
    expect(at(OpenApi.fromApi(Api), "info", "version")).toBe(VERSION)
    expect(at(asyncApiDocument(), "info", "version")).toBe(VERSION)
  })

  it("the Kubernetes base and the example overlay deploy the image of it, labelled with it", () => {
    for (const dir of ["deploy/kubernetes/base", "deploy/kubernetes/overlays/example"]) {
      const kustomization = parse(readFileSync(`${dir}/kustomization.yaml`, "utf8")) as Json
      const images = kustomization["images"] as Array<{ newTag: string }>
      expect(images.map((i) => i.newTag), dir).toEqual([VERSION])
      const labels = (kustomization["labels"] as Array<{ pairs: Record<string, string> }>).flatMap((l) => Object.entries(l.pairs))
      expect(labels.filter(([name]) => name === "app.kubernetes.io/version"), dir).toEqual([["app.kubernetes.io/version", VERSION]])
    }
    const deployment = parseAllDocuments(readFileSync("deploy/kubernetes/base/deployment.yaml", "utf8"))[0]!.toJSON() as Json
    expect(at(deployment, "spec", "template", "spec", "containers", 0, "image")).toBe(`author-directory-service:${VERSION}`)
  })

  it("the compose stack tags the image it builds with it", () => {
    const compose = parse(readFileSync("docker-compose.yml", "utf8")) as { services: { app: Json } }
    expect(compose.services.app).toMatchObject({ build: ".", image: `author-directory-service:${VERSION}` })
  })

  it("every image tag and kit tarball named in the READMEs, the docs and the deploy files is it", () => {
    const named = NAMING_FILES.flatMap((file) =>
      [...readFileSync(file, "utf8").matchAll(/author-directory-(?:service:|client-)(\d+\.\d+\.\d+[^\s"'`)]*)/g)].map((m) => `${file}: ${m[0]}`)
    )
    expect(named.length).toBeGreaterThan(0)
    const other = named.filter((n) => !n.endsWith(`service:${VERSION}`) && !n.endsWith(`client-${VERSION}.tgz`))
    // A digest pinned after the tag (`1.1.0@sha256:…`) names the same release.
    expect(other.filter((n) => !n.includes(`:${VERSION}@sha256`))).toEqual([])
  })
})
