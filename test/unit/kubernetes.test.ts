/**
 * deploy/kubernetes/ stays valid and consistent with the service: every manifest validates against
 * the Kubernetes API schema (kubernetes-models: the official OpenAPI definitions compiled to ajv
 * validators, offline), the kustomization lists every manifest, the probes hit /livez and /readyz on
 * the port the service listens on (the PORT default), the Service targets that port, the ConfigMap
 * and the Secret hold only variables the service reads (.env.example), and — where kubectl is
 * installed — `kubectl kustomize` renders the directory.
 */
import { spawnSync } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { Effect, ConfigProvider } from "effect"
import { Deployment } from "kubernetes-models/apps/v1"
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2"
import { PodDisruptionBudget } from "kubernetes-models/policy/v1"
import { ConfigMap, Secret, Service } from "kubernetes-models/v1"
import { describe, expect, it } from "vitest"
import { parseAllDocuments } from "yaml"
import { appConfig } from "../../src/Config.ts"

const DIR = "deploy/kubernetes"
type Json = Record<string, unknown>

/** The kinds the directory may hold, each with its schema-validating model. */
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  "v1/ConfigMap": ConfigMap,
  "v1/Secret": Secret,
  "v1/Service": Service,
  "apps/v1/Deployment": Deployment,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "autoscaling/v2/HorizontalPodAutoscaler": HorizontalPodAutoscaler
}

const parseYaml = (text: string, source: string): Array<Json> =>
  parseAllDocuments(text).map((doc, i) => {
    expect(doc.errors, `${source} document ${i}`).toEqual([])
    return doc.toJSON() as Json
  })

/** Throws (with ajv's messages) when the object does not match its kind's schema. */
const validate = (object: Json, source: string) => {
  const key = `${String(object["apiVersion"])}/${String(object["kind"])}`
  const Model = MODELS[key]
  if (Model === undefined) throw new Error(`${source}: unexpected kind ${key}`)
  new Model(object as never).validate()
}

const manifestFiles = readdirSync(DIR).filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml").sort()
const manifests = manifestFiles.flatMap((file) => parseYaml(readFileSync(`${DIR}/${file}`, "utf8"), file).map((object) => ({ file, object })))
const ofKind = (kind: string): Json => {
  const found = manifests.filter((m) => m.object["kind"] === kind)
  expect(found, kind).toHaveLength(1)
  return found[0]!.object
}
const at = (value: unknown, ...path: Array<string | number>): unknown =>
  path.reduce<unknown>((v, k) => (v as Record<string | number, unknown> | undefined)?.[k], value)

const deployment = ofKind("Deployment")
const podSpec = at(deployment, "spec", "template", "spec") as Json
const container = (podSpec["containers"] as Array<Json>)[0]!
const containerPorts = container["ports"] as Array<{ name?: string; containerPort: number }>
/** A probe's or a Service's port, named or numbered, as the container port number it reaches. */
const resolvePort = (port: unknown): number | undefined =>
  typeof port === "number" ? port : containerPorts.find((p) => p.name === port)?.containerPort

const documentedVariables = new Set(readFileSync(".env.example", "utf8").split("\n").flatMap((line) => {
  const m = /^# ([A-Z][A-Z0-9_]+)=/.exec(line)
  return m ? [m[1]!] : []
}))

const kubectl = spawnSync("kubectl", ["version", "--client"]).status === 0

describe("deploy/kubernetes manifests", () => {
  it("are the six kinds, each once, and the kustomization lists every manifest file", () => {
    expect(manifests.map((m) => m.object["kind"]).sort()).toEqual(
      ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret", "Service"])
    const [kustomization] = parseYaml(readFileSync(`${DIR}/kustomization.yaml`, "utf8"), "kustomization.yaml")
    expect(kustomization).toMatchObject({ apiVersion: "kustomize.config.k8s.io/v1beta1", kind: "Kustomization" })
    expect([...(kustomization!["resources"] as Array<string>)].sort()).toEqual(manifestFiles)
    expect(kustomization!["images"]).toEqual(expect.arrayContaining([expect.objectContaining({ name: "author-directory-service" })]))
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

  it("runs 2 replicas of author-directory-service:latest on port 8000 named http, the service's PORT default", async () => {
    const defaults = await Effect.runPromise(appConfig.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: {} }))))
    expect(defaults.port).toBe(8000)
    expect(at(deployment, "spec", "replicas")).toBe(2)
    expect(container["image"]).toBe("author-directory-service:latest")
    expect(containerPorts).toEqual([{ name: "http", containerPort: defaults.port, protocol: "TCP" }])
    // Selector and pod labels agree.
    expect(at(deployment, "spec", "template", "metadata", "labels")).toMatchObject(at(deployment, "spec", "selector", "matchLabels") as Json)
  })

  it("probes GET /livez (startup, liveness) and /readyz (readiness) on the container port", () => {
    const probes = { startupProbe: "/livez", livenessProbe: "/livez", readinessProbe: "/readyz" }
    for (const [probe, path] of Object.entries(probes)) {
      const httpGet = at(container, probe, "httpGet") as Json
      expect(httpGet["path"], probe).toBe(path)
      expect(resolvePort(httpGet["port"]), probe).toBe(8000)
    }
  })

  it("the Service maps port 80 to the container port the probes use, selecting the pods", () => {
    const service = ofKind("Service")
    const ports = at(service, "spec", "ports") as Array<Json>
    expect(ports).toHaveLength(1)
    expect(ports[0]).toMatchObject({ port: 80 })
    expect(resolvePort(ports[0]!["targetPort"])).toBe(8000)
    expect(at(deployment, "spec", "template", "metadata", "labels")).toMatchObject(at(service, "spec", "selector") as Json)
  })

  it("sizes resources, outlasts the service's drain and drains endpoints before SIGTERM", () => {
    expect(container["resources"]).toEqual({ requests: { cpu: "250m", memory: "256Mi" }, limits: { cpu: "1", memory: "512Mi" } })
    const preStop = at(container, "lifecycle", "preStop") as Json
    const pause = Number((at(preStop, "exec", "command") as Array<string> | undefined)?.[1] ?? at(preStop, "sleep", "seconds"))
    expect(pause).toBeGreaterThanOrEqual(2)
    expect(pause).toBeLessThanOrEqual(10)
    // The service drains for up to 10 s after SIGTERM (README "Signals").
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

  it("takes its environment from the ConfigMap and the Secret, whose keys are all variables the service reads", () => {
    const configMap = ofKind("ConfigMap")
    const secret = ofKind("Secret")
    expect(container["envFrom"]).toEqual([
      { configMapRef: { name: at(configMap, "metadata", "name") } },
      { secretRef: { name: at(secret, "metadata", "name") } }
    ])
    const data = configMap["data"] as Record<string, string>
    for (const key of Object.keys(data)) expect(documentedVariables.has(key), `ConfigMap key ${key}`).toBe(true)
    expect(data).toMatchObject({
      APP_ENV: "production",
      LOG_FORMAT: "json",
      PROFILING_ENABLED: "false",
      OIDC_ISSUER_URL: "https://keycloak.example.com/realms/author-directory",
      OIDC_CLIENT_ID: "author-directory",
      RATE_LIMIT_FAIL_MODE: "open",
      OTEL_SERVICE_NAME: "author-directory-service"
    })
    // A template: placeholder values in stringData, said so in the file.
    const stringData = secret["stringData"] as Record<string, string>
    expect(Object.keys(stringData).sort()).toEqual(["DATABASE_URL", "OIDC_CLIENT_SECRET", "REDIS_URL"])
    for (const key of Object.keys(stringData)) expect(documentedVariables.has(key), `Secret key ${key}`).toBe(true)
    expect(secret["data"]).toBeUndefined()
    expect(readFileSync(`${DIR}/secret.yaml`, "utf8")).toMatch(/^# TEMPLATE/m)
    expect(stringData["DATABASE_URL"]).toMatch(/^postgres:\/\//)
    expect(stringData["REDIS_URL"]).toMatch(/^redis:\/\//)
  })

  it("keeps one pod through voluntary disruptions and autoscales 2–10 on 70 % CPU", () => {
    const labels = at(deployment, "spec", "template", "metadata", "labels") as Json
    const pdb = ofKind("PodDisruptionBudget")
    expect(at(pdb, "spec", "minAvailable")).toBe(1)
    expect(labels).toMatchObject(at(pdb, "spec", "selector", "matchLabels") as Json)
    const hpa = ofKind("HorizontalPodAutoscaler")
    expect(hpa["apiVersion"]).toBe("autoscaling/v2")
    expect(at(hpa, "spec", "scaleTargetRef")).toEqual({ apiVersion: "apps/v1", kind: "Deployment", name: at(deployment, "metadata", "name") })
    expect(at(hpa, "spec")).toMatchObject({ minReplicas: 2, maxReplicas: 10 })
    expect(at(hpa, "spec", "metrics")).toEqual([
      { type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: 70 } } }
    ])
  })

  it.runIf(kubectl)("`kubectl kustomize` renders the directory into the same valid objects", () => {
    const result = spawnSync("kubectl", ["kustomize", DIR], { encoding: "utf8" })
    expect(result.stderr).toBe("")
    expect(result.status).toBe(0)
    const rendered = parseYaml(result.stdout, "kubectl kustomize")
    expect(rendered.map((o) => o["kind"]).sort()).toEqual(manifests.map((m) => m.object["kind"]).sort())
    for (const object of rendered) expect(() => validate(object, "rendered")).not.toThrow()
    const image = at(rendered.find((o) => o["kind"] === "Deployment"), "spec", "template", "spec", "containers", 0, "image")
    expect(image).toBe("author-directory-service:latest")
  })
})
