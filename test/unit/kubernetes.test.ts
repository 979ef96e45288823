/**
 * deploy/kubernetes/ stays valid and consistent with the service: every manifest of the base and of
 * the example overlay validates against the Kubernetes API schema (kubernetes-models: the official
 * OpenAPI definitions compiled to ajv validators, offline), the kustomization lists every manifest,
 * the probes hit /livez and /readyz on the port the service listens on (the PORT default), the
 * Service exposes only that port while /metrics is scraped on the admin port, the image is a pinned
 * release, the HPA alone owns the replica count, no Secret is in the applied base, the memory and
 * /tmp sizes cover what the service is measured or bounded to use, and — where kubectl is installed
 * — `kubectl kustomize` renders the base and the overlay.
 */
import { spawnSync } from "node:child_process"
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, ConfigProvider } from "effect"
import { Deployment } from "kubernetes-models/apps/v1"
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2"
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1"
import { PodDisruptionBudget } from "kubernetes-models/policy/v1"
import { ConfigMap, Namespace, Secret, Service } from "kubernetes-models/v1"
import { describe, expect, it } from "vitest"
import { parseAllDocuments } from "yaml"
import { appConfig } from "../../src/Config.ts"
import { authorRowsJson } from "../../src/Domain/Author.ts"
import { SPOOLS_MAX } from "../../src/Ws/Streaming.ts"
import { defaultWriterOptions } from "../../src/AuditLogs/WriterOptions.ts"

const ROOT = "deploy/kubernetes"
const BASE = `${ROOT}/base`
const EXAMPLE = `${ROOT}/overlays/example`
type Json = Record<string, unknown>

/** The kinds the directories may hold, each with its schema-validating model. */
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  "v1/ConfigMap": ConfigMap,
  "v1/Namespace": Namespace,
  "v1/Secret": Secret,
  "v1/Service": Service,
  "apps/v1/Deployment": Deployment,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "autoscaling/v2/HorizontalPodAutoscaler": HorizontalPodAutoscaler,
  "networking.k8s.io/v1/NetworkPolicy": NetworkPolicy
}

const parseYaml = (text: string, source: string): Array<Json> =>
  parseAllDocuments(text).map((doc, i) => {
    expect(doc.errors, `${source} document ${i}`).toEqual([])
    return doc.toJSON() as Json
  })
const readYaml = (path: string) => parseYaml(readFileSync(path, "utf8"), path)

/** Throws (with ajv's messages) when the object does not match its kind's schema. */
const validate = (object: Json, source: string) => {
  const key = `${String(object["apiVersion"])}/${String(object["kind"])}`
  const Model = MODELS[key]
  if (Model === undefined) throw new Error(`${source}: unexpected kind ${key}`)
  new Model(object as never).validate()
}

const manifestFiles = readdirSync(BASE).filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml").sort()
const manifests = manifestFiles.flatMap((file) => readYaml(`${BASE}/${file}`).map((object) => ({ file, object })))
const ofKind = (kind: string): Json => {
  const found = manifests.filter((m) => m.object["kind"] === kind)
  expect(found, kind).toHaveLength(1)
  return found[0]!.object
}
const at = (value: unknown, ...path: Array<string | number>): unknown =>
  path.reduce<unknown>((v, k) => (v as Record<string | number, unknown> | undefined)?.[k], value)

const kustomization = readYaml(`${BASE}/kustomization.yaml`)[0]!
const deployment = ofKind("Deployment")
const podSpec = at(deployment, "spec", "template", "spec") as Json
const container = (podSpec["containers"] as Array<Json>)[0]!
const containerPorts = container["ports"] as Array<{ name?: string; containerPort: number }>
const env = container["env"] as Array<{ name: string; value: string }>
/** A probe's or a Service's port, named or numbered, as the container port number it reaches. */
const resolvePort = (port: unknown): number | undefined =>
  typeof port === "number" ? port : containerPorts.find((p) => p.name === port)?.containerPort

const documentedVariables = new Set(readFileSync(".env.example", "utf8").split("\n").flatMap((line) => {
  const m = /^# ([A-Z][A-Z0-9_]+)=/.exec(line)
  return m ? [m[1]!] : []
}))
const packageVersion = (JSON.parse(readFileSync("package.json", "utf8")) as { version: string }).version

/** A Kubernetes quantity ("768Mi", "1Gi", "250m" is not a byte figure) in bytes. */
const bytes = (quantity: unknown): number => {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(String(quantity))
  if (m === null) throw new Error(`not a byte quantity: ${String(quantity)}`)
  return Number(m[1]) * { "": 1, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 }[m[2] ?? ""]!
}
const MB = 1000 * 1000
const MiB = 1024 * 1024

const kubectl = spawnSync("kubectl", ["version", "--client"]).status === 0
const render = (dir: string) => {
  const result = spawnSync("kubectl", ["kustomize", dir], { encoding: "utf8" })
  expect(result.stderr).toBe("")
  expect(result.status).toBe(0)
  return parseYaml(result.stdout, `kubectl kustomize ${dir}`)
}

describe("deploy/kubernetes base", () => {
  it("is five kinds, each once, no Secret, and the kustomization lists every manifest file", () => {
    expect(manifests.map((m) => m.object["kind"]).sort()).toEqual(
      ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"])
    expect(kustomization).toMatchObject({ apiVersion: "kustomize.config.k8s.io/v1beta1", kind: "Kustomization" })
    expect([...(kustomization["resources"] as Array<string>)].sort()).toEqual(manifestFiles)
    // Nothing in the base generates a Secret either: applying it never overwrites one made elsewhere.
    expect(kustomization["secretGenerator"]).toBeUndefined()
  })

  it.each(manifestFiles)("%s validates against the Kubernetes schema", (file) => {
    for (const { object } of manifests.filter((m) => m.file === file)) {
      expect(object["metadata"], file).toMatchObject({ name: expect.any(String) })
      expect(() => validate(object, file), file).not.toThrow()
    }
  })

  it("the validator rejects what the API server would (a string port, a nameless container, no selector, an unknown protocol)", () => {
    const broken = (edit: (c: Json) => void) => {
      const copy = structuredClone(deployment)
      edit((at(copy, "spec", "template", "spec", "containers") as Array<Json>)[0]!)
      return () => validate(copy, "broken")
    }
    expect(broken((c) => { (c["ports"] as Array<Json>)[0]!["containerPort"] = "8000" })).toThrow(/containerPort/)
    expect(broken((c) => { delete c["name"] })).toThrow(/name/)
    expect(broken((c) => { (c["ports"] as Array<Json>)[0]!["protocol"] = "HTTP" })).toThrow(/protocol/)
    expect(() => validate({ ...deployment, spec: { ...(deployment["spec"] as Json), selector: undefined } }, "broken")).toThrow(/selector/)
    expect(() => validate({ ...ofKind("Service"), spec: { ports: [{ port: "eighty" }] } }, "broken")).toThrow(/port/)
  })

  it("runs the image of this release (package.json's version, never latest), labelled with that version", () => {
    expect(container["image"]).toBe(`author-directory-service:${packageVersion}`)
    expect(kustomization["images"]).toEqual([{ name: "author-directory-service", newName: "author-directory-service", newTag: packageVersion }])
    // IfNotPresent is only safe with a tag that names one image.
    expect(container["imagePullPolicy"]).toBe("IfNotPresent")
    expect(String(container["image"])).not.toMatch(/:latest$|^[^:]+$/)
    const labels = (kustomization["labels"] as Array<{ pairs: Record<string, string>; includeSelectors?: boolean; includeTemplates?: boolean }>)
    const version = labels.find((l) => "app.kubernetes.io/version" in l.pairs)
    // On every object and its pods, never in a selector (a selector cannot change between releases).
    expect(version).toEqual({ pairs: { "app.kubernetes.io/version": packageVersion }, includeSelectors: false, includeTemplates: true })
  })

  it("has no replica count: the HPA owns it (a count here would reset the HPA's on every apply)", () => {
    expect(deployment["spec"]).not.toHaveProperty("replicas")
    const hpa = ofKind("HorizontalPodAutoscaler")
    expect(at(hpa, "spec", "scaleTargetRef")).toEqual({ apiVersion: "apps/v1", kind: "Deployment", name: at(deployment, "metadata", "name") })
  })

  it("listens on http 8000 (the service's PORT default) and admin 9464 (ADMIN_PORT), selector and pod labels agreeing", async () => {
    const defaults = await Effect.runPromise(appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: {} }))))
    expect(defaults.port).toBe(8000)
    expect(containerPorts).toEqual([
      { name: "http", containerPort: defaults.port, protocol: "TCP" },
      { name: "admin", containerPort: 9464, protocol: "TCP" }
    ])
    expect(env.find((e) => e.name === "ADMIN_PORT")).toEqual({ name: "ADMIN_PORT", value: String(resolvePort("admin")) })
    expect(at(deployment, "spec", "template", "metadata", "labels")).toMatchObject(at(deployment, "spec", "selector", "matchLabels") as Json)
  })

  it("is scraped on the admin port (pod annotations), where ADMIN_PORT serves /metrics", () => {
    expect(at(deployment, "spec", "template", "metadata", "annotations")).toEqual({
      "prometheus.io/scrape": "true",
      "prometheus.io/port": String(resolvePort("admin")),
      "prometheus.io/path": "/metrics"
    })
  })

  it("probes GET /livez (startup, liveness) and /readyz (readiness) on the API port", () => {
    const probes = { startupProbe: "/livez", livenessProbe: "/livez", readinessProbe: "/readyz" }
    for (const [probe, path] of Object.entries(probes)) {
      const httpGet = at(container, probe, "httpGet") as Json
      expect(httpGet["path"], probe).toBe(path)
      expect(resolvePort(httpGet["port"]), probe).toBe(8000)
    }
  })

  it("the Service maps port 80 to the API port only (not the admin port), selecting the pods", () => {
    const service = ofKind("Service")
    const ports = at(service, "spec", "ports") as Array<Json>
    expect(ports).toEqual([{ name: "http", port: 80, targetPort: "http", protocol: "TCP" }])
    expect(resolvePort(ports[0]!["targetPort"])).toBe(8000)
    expect(at(deployment, "spec", "template", "metadata", "labels")).toMatchObject(at(service, "spec", "selector") as Json)
  })

  it("sizes memory from the service's measurements on PostgreSQL + Redis and its bounds, with V8's heap below the limit", () => {
    const resources = container["resources"] as { requests: Json; limits: Json }
    expect(resources).toMatchObject({ requests: { cpu: "250m" }, limits: { cpu: "1" } })
    const request = bytes(resources.requests["memory"])
    const limit = bytes(resources.limits["memory"])
    // The figures the comment names: docs/performance.md's RSS at the end of the bench on PostgreSQL +
    // Redis, the read cache's default bound, the audit buffer's bound, the docs bundles' first visit.
    const endOfBench = 420 * MB
    const readCache = 32 * MiB
    const auditBuffer = defaultWriterOptions.bufferMaxBytes
    const docsBundles = 46 * MB
    expect(auditBuffer).toBe(64 * MiB)
    expect(request).toBeGreaterThanOrEqual(endOfBench + readCache)
    expect(limit).toBeGreaterThanOrEqual(endOfBench + readCache + auditBuffer + docsBundles)
    expect(limit).toBeGreaterThanOrEqual(request)
    const comment = readFileSync(`${BASE}/deployment.yaml`, "utf8")
    for (const figure of ["420 MB", "32 MiB", "64 MiB", "46 MB"]) expect(comment, figure).toContain(figure)
    // Not the embedded database's figures (~290 MB at start, ~700 MB with PGlite): production runs on PostgreSQL.
    expect(comment).not.toMatch(/290 MB|700 MB|PGlite/)
    // The old space leaves a quarter of the limit or more to what lives outside V8's heap.
    const heap = /^--max-old-space-size=(\d+)$/.exec(env.find((e) => e.name === "NODE_OPTIONS")?.value ?? "")
    expect(heap).not.toBeNull()
    expect(Number(heap![1]) * MiB).toBeGreaterThanOrEqual(endOfBench)
    expect(Number(heap![1]) * MiB).toBeLessThanOrEqual(limit * 0.75)
    expect(env.map((e) => e.name)).toEqual(["ADMIN_PORT", "NODE_OPTIONS"])
  })

  it("outlasts the service's drain and drains endpoints before SIGTERM", () => {
    const preStop = at(container, "lifecycle", "preStop") as Json
    const pause = Number((at(preStop, "exec", "command") as Array<string> | undefined)?.[1] ?? at(preStop, "sleep", "seconds"))
    expect(pause).toBeGreaterThanOrEqual(2)
    expect(pause).toBeLessThanOrEqual(10)
    // The service drains for up to 10 s after SIGTERM (docs/operations.md#shutdown).
    expect(podSpec["terminationGracePeriodSeconds"]).toBe(30)
    expect(podSpec["terminationGracePeriodSeconds"] as number).toBeGreaterThan(pause + 10)
  })

  it("runs as the image's node user, read-only, unprivileged, with writable emptyDirs where the service writes", () => {
    expect(readFileSync("Dockerfile", "utf8")).toMatch(/^USER node$/m) // uid 1000 in the node images
    expect(podSpec["securityContext"]).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: "RuntimeDefault" } })
    expect(container["securityContext"]).toMatchObject({
      runAsNonRoot: true,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" }
    })
    const volumes = podSpec["volumes"] as Array<Json>
    const mounts = container["volumeMounts"] as Array<{ name: string; mountPath: string }>
    expect(mounts.map((m) => m.mountPath).sort()).toEqual(["/app/.data", "/app/profiling_reports", "/tmp"])
    for (const mount of mounts) expect(volumes.find((v) => v["name"] === mount.name), mount.mountPath).toHaveProperty("emptyDir")
    // The image points DATA_DIR and PROFILING_OUTPUT_DIR at those mounts.
    const dockerfile = readFileSync("Dockerfile", "utf8")
    expect(dockerfile).toContain("DATA_DIR=/app/.data")
    expect(dockerfile).toContain("PROFILING_OUTPUT_DIR=/app/profiling_reports")
  })

  it("gives /tmp room for the protobuf spools of package 1 at 1,000,000 authors, within the ephemeral-storage limit", () => {
    // One list as the bench seeds it (two-word names, the id appended), in the bytes the spool writes.
    const created_at = "2026-11-25T20:38:27.471000"
    let listBytes = 2
    for (let digits = 1; digits <= 7; digits++) {
      const first = 10 ** (digits - 1)
      const count = Math.min(10 ** digits - 1, 1_000_000) - first + 1
      listBytes += count * (authorRowsJson([{ id: first, name: `Abcdefg Abcdefghi ${first}`, created_at }]).length + 1)
    }
    expect(listBytes).toBeGreaterThan(75 * MB)
    const volumes = podSpec["volumes"] as Array<{ name: string; emptyDir: { sizeLimit: string } }>
    const tmp = volumes.find((v) => v.name === (container["volumeMounts"] as Array<Json>).find((m) => m["mountPath"] === "/tmp")!["name"])!
    expect(bytes(tmp.emptyDir.sizeLimit)).toBeGreaterThanOrEqual(SPOOLS_MAX * listBytes)
    // The spool files are unlinked while open: a limit on the container's ephemeral storage holds them
    // too, and is at least what the emptyDirs may fill.
    const resources = container["resources"] as { requests: Json; limits: Json }
    const emptyDirs = volumes.reduce((n, v) => n + bytes(v.emptyDir.sizeLimit), 0)
    expect(bytes(resources.limits["ephemeral-storage"])).toBeGreaterThan(emptyDirs)
    expect(bytes(resources.requests["ephemeral-storage"])).toBeGreaterThan(0)
  })

  it("takes its environment from the ConfigMap and a Secret named by reference only; ConfigMap keys are all variables the service reads", () => {
    const configMap = ofKind("ConfigMap")
    expect(container["envFrom"]).toEqual([
      { configMapRef: { name: at(configMap, "metadata", "name") } },
      { secretRef: { name: "author-directory-secrets" } }
    ])
    const data = configMap["data"] as Record<string, string>
    for (const key of Object.keys(data)) expect(documentedVariables.has(key), `ConfigMap key ${key}`).toBe(true)
    expect(data).toMatchObject({
      APP_ENV: "production",
      LOG_FORMAT: "json",
      PROFILING_ENABLED: "false",
      OIDC_CLIENT_ID: "author-directory",
      RATE_LIMIT_FAIL_MODE: "open",
      OTEL_SERVICE_NAME: "author-directory-service"
    })
    // TRUSTED_PROXIES stays a comment (the ingress's addresses are the cluster's), with what it changes.
    expect(data["TRUSTED_PROXIES"]).toBeUndefined()
    // No issuer: a placeholder here would give Ready-looking pods of nobody's provider; the overlay sets it.
    expect(data["OIDC_ISSUER_URL"]).toBeUndefined()
    expect(readFileSync(`${BASE}/configmap.yaml`, "utf8")).toMatch(/# OIDC_ISSUER_URL: .*set by the\n\s*#\s+overlay/)
    expect(readFileSync(`${BASE}/configmap.yaml`, "utf8")).toMatch(/# TRUSTED_PROXIES: .*ingress/)
  })

  it("lets a drain take one pod at a time and autoscales 2–10 on 70 % CPU", () => {
    const labels = at(deployment, "spec", "template", "metadata", "labels") as Json
    const pdb = ofKind("PodDisruptionBudget")
    expect(at(pdb, "spec")).toMatchObject({ maxUnavailable: 1 })
    expect(at(pdb, "spec")).not.toHaveProperty("minAvailable")
    expect(labels).toMatchObject(at(pdb, "spec", "selector", "matchLabels") as Json)
    const hpa = ofKind("HorizontalPodAutoscaler")
    expect(hpa["apiVersion"]).toBe("autoscaling/v2")
    expect(at(hpa, "spec")).toMatchObject({ minReplicas: 2, maxReplicas: 10 })
    expect(at(hpa, "spec", "metrics")).toEqual([
      { type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: 70 } } }
    ])
  })

  it.runIf(kubectl)("`kubectl kustomize` renders the base into the same valid objects, with the pinned image and version label", () => {
    const rendered = render(BASE)
    expect(rendered.map((o) => o["kind"]).sort()).toEqual(manifests.map((m) => m.object["kind"]).sort())
    for (const object of rendered) {
      expect(() => validate(object, "rendered")).not.toThrow()
      expect(at(object, "metadata", "labels", "app.kubernetes.io/version"), String(object["kind"])).toBe(packageVersion)
    }
    const renderedDeployment = rendered.find((o) => o["kind"] === "Deployment")
    expect(at(renderedDeployment, "spec", "template", "spec", "containers", 0, "image")).toBe(`author-directory-service:${packageVersion}`)
    expect(at(renderedDeployment, "spec", "template", "metadata", "labels", "app.kubernetes.io/version")).toBe(packageVersion)
    expect(at(renderedDeployment, "spec", "selector", "matchLabels")).toEqual({ "app.kubernetes.io/name": "author-directory-service" })
  })
})

describe("deploy/kubernetes/overlays/example", () => {
  const overlay = readYaml(`${EXAMPLE}/kustomization.yaml`)[0]!
  const keysOf = (text: string) => text.split("\n").flatMap((l) => /^([A-Z][A-Z0-9_]+)=/.exec(l)?.[1] ?? [])
  const template = readFileSync(`${EXAMPLE}/secrets.env.example`, "utf8")
  const templateKeys = keysOf(template)
  const settings = readFileSync(`${EXAMPLE}/settings.env.example`, "utf8")

  it("sets the identity provider's issuer from a git-ignored settings.env merged into the ConfigMap; its template's value is a placeholder", () => {
    expect(overlay["configMapGenerator"]).toEqual([{ name: "author-directory-config", behavior: "merge", envs: ["settings.env"] }])
    expect(readFileSync(`${EXAMPLE}/.gitignore`, "utf8").split("\n")).toContain("settings.env")
    expect(spawnSync("git", ["check-ignore", "-q", `${EXAMPLE}/settings.env`]).status).toBe(0)
    expect(keysOf(settings)).toEqual(["OIDC_ISSUER_URL"])
    expect(settings).toMatch(/^OIDC_ISSUER_URL=https:\/\/CHANGE-ME\./m)
  })

  it("generates the Secret from a git-ignored env file, whose template holds placeholders for variables the service reads", () => {
    expect(overlay["resources"]).toEqual(["namespace.yaml", "../../base", "networkpolicy.yaml"])
    expect(overlay["secretGenerator"]).toEqual([expect.objectContaining({ name: "author-directory-secrets", envs: ["secrets.env"] })])
    expect(readFileSync(`${EXAMPLE}/.gitignore`, "utf8").split("\n")).toContain("secrets.env")
    expect([...templateKeys].sort()).toEqual(["DATABASE_URL", "OIDC_CLIENT_SECRET", "REDIS_URL"])
    for (const key of templateKeys) expect(documentedVariables.has(key), key).toBe(true)
    expect(template).toMatch(/^DATABASE_URL=postgres:\/\/.*CHANGE-ME/m)
    expect(template).toMatch(/^REDIS_URL=redis:\/\/.*CHANGE-ME/m)
    expect(spawnSync("git", ["check-ignore", "-q", `${EXAMPLE}/secrets.env`]).status).toBe(0)
  })

  it("creates the namespace it puts everything in (a fresh cluster has none by that name)", () => {
    const [namespace] = readYaml(`${EXAMPLE}/namespace.yaml`)
    expect(() => validate(namespace!, "namespace.yaml")).not.toThrow()
    expect(namespace).toEqual({ apiVersion: "v1", kind: "Namespace", metadata: { name: overlay["namespace"] } })
  })

  it("pins its own registry's image with the version label equal to the tag", () => {
    const [image] = overlay["images"] as Array<{ newTag: string }>
    const labels = overlay["labels"] as Array<{ pairs: Record<string, string> }>
    expect(labels.find((l) => "app.kubernetes.io/version" in l.pairs)?.pairs["app.kubernetes.io/version"]).toBe(image!.newTag)
    expect(image!.newTag).toMatch(/^\d+\.\d+\.\d+/)
  })

  it("has a NetworkPolicy that admits the API port from any source and the admin port from the monitoring namespace only", () => {
    const [policy] = readYaml(`${EXAMPLE}/networkpolicy.yaml`)
    expect(() => validate(policy!, "networkpolicy.yaml")).not.toThrow()
    expect(at(policy, "spec", "podSelector", "matchLabels")).toEqual(at(deployment, "spec", "selector", "matchLabels"))
    const rules = at(policy, "spec", "ingress") as Array<{ from?: Array<Json>; ports: Array<{ port: string }> }>
    const byPort = (name: string) => rules.filter((r) => r.ports.some((p) => p.port === name))
    expect(byPort("http")).toEqual([{ ports: [{ port: "http", protocol: "TCP" }] }])
    expect(byPort("admin")).toEqual([{ from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } } }], ports: [{ port: "admin", protocol: "TCP" }] }])
    for (const rule of rules) for (const { port } of rule.ports) expect(resolvePort(port), port).toBeDefined()
  })

  it("the PodMonitor (Prometheus Operator) scrapes the admin port and copies the label the alerts select", () => {
    const [monitor] = readYaml(`${ROOT}/monitoring/podmonitor.yaml`)
    expect(monitor).toMatchObject({
      apiVersion: "monitoring.coreos.com/v1",
      kind: "PodMonitor",
      spec: {
        selector: { matchLabels: at(deployment, "spec", "selector", "matchLabels") },
        podTargetLabels: ["app.kubernetes.io/name"],
        podMetricsEndpoints: [{ port: "admin", path: "/metrics" }]
      }
    })
    expect(readYaml(`${ROOT}/monitoring/kustomization.yaml`)[0]!["resources"]).toEqual(["podmonitor.yaml"])
  })

  it.runIf(kubectl)("`kubectl kustomize` renders it with a secrets.env and a settings.env: a generated Secret the Deployment references, the issuer in the ConfigMap; no placeholder applied without either", () => {
    const dir = mkdtempSync(join(tmpdir(), "ads-kustomize-"))
    try {
      cpSync(ROOT, join(dir, "kubernetes"), { recursive: true })
      const copy = join(dir, "kubernetes", "overlays", "example")
      rmSync(join(copy, "secrets.env"), { force: true })
      rmSync(join(copy, "settings.env"), { force: true })
      // Without secrets.env, or without settings.env, the build fails: nothing with placeholder values is applied.
      writeFileSync(join(copy, "settings.env"), settings)
      const missing = spawnSync("kubectl", ["kustomize", copy], { encoding: "utf8" })
      expect(missing.status).not.toBe(0)
      expect(missing.stderr).toContain("secrets.env")
      writeFileSync(join(copy, "secrets.env"), template)
      rmSync(join(copy, "settings.env"))
      const noSettings = spawnSync("kubectl", ["kustomize", copy], { encoding: "utf8" })
      expect(noSettings.status).not.toBe(0)
      expect(noSettings.stderr).toContain("settings.env")
      const issuer = "https://keycloak.test.example/realms/author-directory"
      writeFileSync(join(copy, "settings.env"), settings.replace(/^OIDC_ISSUER_URL=.*$/m, `OIDC_ISSUER_URL=${issuer}`))
      const rendered = render(copy)
      for (const object of rendered) {
        // kustomize wraps long base64 values at 70 columns, which the API server's decoder skips over
        // (Go's base64 ignores newlines) and the schema's `byte` format does not.
        if (object["kind"] === "Secret") {
          object["data"] = Object.fromEntries(Object.entries(object["data"] as Record<string, string>).map(([k, v]) => [k, v.replace(/\n/g, "")]))
        }
        expect(() => validate(object, "overlay")).not.toThrow()
        // The Namespace itself is not namespaced: it is the one of the rest, applied before them.
        if (object["kind"] === "Namespace") expect(at(object, "metadata", "name")).toBe(overlay["namespace"])
        else expect(at(object, "metadata", "namespace"), String(object["kind"])).toBe(overlay["namespace"])
      }
      expect(rendered[0]?.["kind"]).toBe("Namespace")
      const secret = rendered.find((o) => o["kind"] === "Secret")!
      const secretName = String(at(secret, "metadata", "name"))
      expect(secretName).toMatch(/^author-directory-secrets-[a-z0-9]+$/)
      expect(Object.keys(secret["data"] as Json).sort()).toEqual([...templateKeys].sort())
      const renderedDeployment = rendered.find((o) => o["kind"] === "Deployment")
      expect(at(renderedDeployment, "spec", "template", "spec", "containers", 0, "envFrom", 1)).toEqual({ secretRef: { name: secretName } })
      // The issuer is the overlay's; the base's other settings stay.
      const configMap = rendered.find((o) => o["kind"] === "ConfigMap")!
      expect(configMap["data"]).toMatchObject({ OIDC_ISSUER_URL: issuer, APP_ENV: "production", OIDC_CLIENT_ID: "author-directory" })
      const configMapName = at(renderedDeployment, "spec", "template", "spec", "containers", 0, "envFrom", 0, "configMapRef", "name")
      expect(configMapName).toBe(at(configMap, "metadata", "name"))
      const [image] = overlay["images"] as Array<{ newName: string; newTag: string }>
      expect(at(renderedDeployment, "spec", "template", "spec", "containers", 0, "image")).toBe(`${image!.newName}:${image!.newTag}`)
      expect(rendered.map((o) => o["kind"]).sort()).toEqual(
        ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Namespace", "NetworkPolicy", "PodDisruptionBudget", "Secret", "Service"])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
