/**
 * The observability deployment stays consistent with the code: the Grafana dashboard charts every
 * documented metric the service registers (each panel filtered by the `instance` variable), Prometheus
 * scrapes `/metrics` of every app replica on its admin port and loads alert rules on the service's
 * own metrics, selected by a label that compose and Kubernetes both attach (and, where promtool is
 * installed, `promtool test rules` runs alerts.test.yml and `promtool check config` accepts
 * prometheus.yml), the collector receives OTLP/HTTP where the app sends it, the compose stack runs
 * two replicas behind a WebSocket-capable load balancer with PostgreSQL and Redis unpublished and the
 * development services on loopback only, every image is pinned to a version, and
 * `docker compose config` accepts the file (where a compose client is installed).
 */
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { describe, expect, it } from "vitest"
import { parse } from "yaml"
import { defaultWriterOptions } from "../../src/AuditLogs/WriterOptions.ts"
import { registry } from "../../src/Observability/Metrics.ts"

const INTERFACE_METRICS = [
  "http_requests_total", "http_request_duration_seconds", "http_requests_in_progress", "ws_connections_active",
  "ws_connections_total", "ws_messages_received_total", "ws_messages_sent_total", "ws_message_processing_duration_seconds",
  "db_query_duration_seconds", "db_connections_active", "db_errors_total", "rate_limit_hits_total", "auth_attempts_total",
  "token_validation_total", "app_info"
]

const compose = readFileSync("docker-compose.yml", "utf8")
type Json = Record<string, unknown>
type Service = Json & { environment?: Record<string, string>; ports?: Array<string>; healthcheck?: { test: Array<string> } }
const composeFile = parse(compose) as { services: Record<string, Service>; networks?: Json }
const services = composeFile.services
const prometheusConfig = parse(readFileSync("deploy/prometheus/prometheus.yml", "utf8")) as {
  rule_files?: Array<string>
  scrape_configs: Array<Json & { job_name: string; dns_sd_configs?: Array<{ names: Array<string>; type?: string; port: number }>; static_configs?: Array<{ targets: Array<string> }> }>
}

interface Dashboard {
  panels: Array<{ id: number; title: string; targets: Array<{ expr: string }> }>
  templating: { list: Array<Json & { name: string }> }
}
const dashboard = JSON.parse(readFileSync("deploy/grafana/dashboards/author-directory.json", "utf8")) as Dashboard

const PROMQL_KEYWORDS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"])
/**
 * The metric selectors of a PromQL expression, as [metric name, `{…}` or ""]: every identifier
 * that is not a function (followed by `(`), a keyword, in a label list (`by (...)`), a number or
 * inside a selector's braces.
 */
const selectors = (expr: string): Array<[string, string]> => {
  const stripped = expr.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, "")
  const found: Array<[string, string]> = []
  for (const m of stripped.matchAll(/([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?(\s*\()?/g)) {
    const [, name, selector, call] = m
    if (call !== undefined || PROMQL_KEYWORDS.has(name!.toLowerCase())) continue
    if (/^\d/.test(name!) || (m.index > 0 && /[\d.]$/.test(stripped.slice(0, m.index)))) continue // 1e-9
    found.push([name!, selector ?? ""])
  }
  return found
}
/** The metric selectors of a PromQL expression that do not filter on `instance=~"$instance"`. */
const unfilteredSelectors = (expr: string): Array<string> =>
  selectors(expr).filter(([, selector]) => !selector.includes(`instance=~"$instance"`)).map(([name]) => name)

const at = (value: unknown, ...path: Array<string | number>): unknown =>
  path.reduce<unknown>((v, k) => (v as Record<string | number, unknown> | undefined)?.[k], value)

interface Rule { alert: string; expr: string; for: string; labels: Record<string, string>; annotations: Record<string, string> }
const rules = (parse(readFileSync("deploy/prometheus/alerts.yml", "utf8")) as { groups: Array<{ rules: Array<Rule> }> })
  .groups.flatMap((g) => g.rules)
const ruleExpr = (alert: string) => rules.find((r) => r.alert === alert)!.expr.replace(/\s+/g, " ").trim()

/** The Deployment of deploy/kubernetes/base, and its pod template's labels. */
const deployment = parse(readFileSync("deploy/kubernetes/base/deployment.yaml", "utf8")) as Json
const podTemplate = at(deployment, "spec", "template", "spec", "containers", 0) as Json & { env: Array<{ name: string; value: string }> }
/** Prometheus' labelmap of a Kubernetes label name (`app.kubernetes.io/name` → `app_kubernetes_io_name`). */
const sanitize = (label: string) => label.replace(/[^a-zA-Z0-9_]/g, "_")
/** The label every alert selects the service by, and its value. */
const SERVICE_LABEL = "app_kubernetes_io_name"
const SERVICE_NAME = "author-directory-service"

const promtool = spawnSync("promtool", ["--version"]).status === 0

const composeClient = (() => {
  if (spawnSync("docker", ["compose", "version"]).status === 0) return ["docker", "compose"]
  if (spawnSync("docker-compose", ["version"]).status === 0) return ["docker-compose"]
  return undefined
})()

describe("observability deployment", () => {
  it("charts every documented metric on the provisioned dashboard, and the service registers each", () => {
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)).join("\n")
    for (const name of INTERFACE_METRICS) {
      expect(exprs, name).toContain(name)
      expect(registry.getSingleMetric(name), name).toBeDefined()
    }
    const datasource = readFileSync("deploy/grafana/provisioning/datasources/prometheus.yml", "utf8")
    expect(datasource).toContain("uid: prometheus")
    expect(datasource).toContain("url: http://prometheus:9090")
  })

  it("has an `instance` variable (from app_info) and every panel's every selector filters on it", () => {
    const variable = dashboard.templating.list.find((v) => v.name === "instance")
    expect(variable).toMatchObject({ type: "query", includeAll: true, multi: true, datasource: { uid: "prometheus" } })
    expect(JSON.stringify(variable!["query"])).toContain("label_values(app_info, instance)")
    for (const panel of dashboard.panels) {
      expect(panel.targets.length, panel.title).toBeGreaterThan(0)
      for (const { expr } of panel.targets) {
        expect(expr, panel.title).toContain(`instance=~"$instance"`)
        expect(unfilteredSelectors(expr), `${panel.title}: ${expr}`).toEqual([])
      }
    }
    // The checker itself: a bare selector is caught, functions, label lists and numbers are not.
    expect(unfilteredSelectors(`sum by (le) (rate(a_total{instance=~"$instance"}[5m])) / clamp_min(sum(rate(b_total[5m])), 1e-9)`)).toEqual(["b_total"])
    // The metrics charted before the variable came are all still charted.
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)).join("\n")
    for (const name of ["process_cpu_seconds_total", "process_resident_memory_bytes", "nodejs_eventloop_lag_p99_seconds", "audit_records_dropped_total", "rate_limit_store_errors_total"]) {
      expect(exprs, name).toContain(name)
    }
  })

  it("scrapes every app replica's /metrics on its ADMIN_PORT and sends spans to the collector's OTLP/HTTP receiver", () => {
    const job = prometheusConfig.scrape_configs.find((c) => c.job_name === "author-directory")!
    expect(job["metrics_path"]).toBe("/metrics")
    // Either DNS discovery of the scaled `app` service (every replica's address) or a static target per instance.
    const dns = job.dns_sd_configs?.find((c) => c.names.includes("app"))
    const staticTargets = (job.static_configs ?? []).flatMap((c) => c.targets)
    const instances = Object.keys(services).filter((name) => /^app\d*$/.test(name))
    for (const name of instances) {
      expect(services[name]!.environment, name).toMatchObject({ PORT: "8000", ADMIN_PORT: "9464" })
    }
    if (dns !== undefined) expect(dns).toMatchObject({ type: "A", port: 9464 })
    else for (const name of instances) expect(staticTargets, name).toContain(`${name}:9464`)
    // The label the alert rules select on, set on every series of the job.
    expect(job["relabel_configs"]).toEqual([{ target_label: SERVICE_LABEL, replacement: SERVICE_NAME }])
    const collector = readFileSync("deploy/otel/collector.yaml", "utf8")
    expect(collector).toMatch(/http:\s*\n\s*endpoint: 0\.0\.0\.0:4318/)
    expect(compose).toContain("OTEL_EXPORTER_OTLP_ENDPOINT: http://otel-collector:4318")
    for (const service of ["otel-collector:", "jaeger:", "prometheus:", "grafana:"]) expect(compose).toContain(`\n  ${service}`)
    // Every file the compose file mounts from deploy/ exists.
    for (const [, path] of compose.matchAll(/- \.\/(deploy\/[^:]+):/g)) expect(existsSync(path!), path).toBe(true)
  })

  it("loads alert rules on the service's metrics: 5xx rate, p99 latency, readiness, audit drops and buffer, memory, event loop, WebSocket overflows, rate-limit store, database, instance down", () => {
    expect(existsSync("deploy/prometheus/alerts.yml")).toBe(true)
    // prometheus.yml loads the file from where the compose file mounts it.
    expect(prometheusConfig.rule_files).toContain("/etc/prometheus/alerts.yml")
    expect(services["prometheus"]?.["volumes"]).toContain("./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro")
    for (const rule of rules as unknown as Array<Json>) {
      expect(rule, String(rule["alert"])).toMatchObject({
        alert: expect.any(String),
        expr: expect.any(String),
        for: expect.stringMatching(/^\d+[smh]$/),
        labels: { severity: expect.stringMatching(/^(critical|warning|info)$/) },
        annotations: { summary: expect.any(String) }
      })
    }
    const exprs = rules.map((r) => String(r["expr"]).replace(/\s+/g, " ").trim())
    const conditions: Record<string, RegExp> = {
      "high 5xx error rate": /http_requests_total\{[^}]*status_code=~"5\.\."/,
      "p99 latency over 1 s": /histogram_quantile\(0\.99, .*http_request_duration_seconds_bucket.*\) > 1$/,
      "audit records dropped": /^increase\(audit_records_dropped_total(\{[^}]*\})?\[5m\]\) > 0$/,
      "rate-limit store errors": /rate_limit_store_errors_total/,
      "database errors": /db_errors_total/,
      "instance down": /^up(\{[^}]*\})? == 0$/,
      "readiness answered 503": /http_requests_total\{[^}]*endpoint="\/readyz", status_code="503"\}/,
      "memory near the limit": /^process_resident_memory_bytes\{[^}]*\} \/ \(\d+ \* 1024 \* 1024\) > 0\.9$/,
      "audit buffer filling": /^audit_buffer_bytes\{[^}]*\} > \d+ \* 1024 \* 1024$/,
      "WebSocket send queue overflows": /increase\(ws_send_queue_overflows_total\{[^}]*\}\[\d+m\]\)/,
      "event-loop lag": /^nodejs_eventloop_lag_p99_seconds\{[^}]*\} > /
    }
    for (const [condition, pattern] of Object.entries(conditions)) {
      expect(exprs.some((e) => pattern.test(e)), condition).toBe(true)
    }
    // Every metric an alert names is one the service registers (or Prometheus' own `up`).
    for (const [name] of exprs.flatMap(selectors)) {
      if (name !== "up") expect(registry.getSingleMetric(name.replace(/_bucket$/, "")), name).toBeDefined()
    }
  })

  it("every alert selects the service by a label both compose and Kubernetes attach, never by `job`", () => {
    // Kubernetes: the pod label app.kubernetes.io/name, mapped by the scrape job (labelmap, or the
    // PodMonitor's podTargetLabels); compose: the scrape job's relabelling (checked above).
    const podLabels = at(deployment, "spec", "template", "metadata", "labels") as Record<string, string>
    expect(sanitize("app.kubernetes.io/name")).toBe(SERVICE_LABEL)
    expect(podLabels["app.kubernetes.io/name"]).toBe(SERVICE_NAME)
    for (const rule of rules) {
      const found = selectors(rule.expr)
      expect(found.length, rule.alert).toBeGreaterThan(0)
      for (const [name, selector] of found) {
        expect(selector, `${rule.alert}: ${name}`).toContain(`${SERVICE_LABEL}="${SERVICE_NAME}"`)
        expect(selector, `${rule.alert}: ${name}`).not.toMatch(/\bjob\s*=/)
      }
    }
  })

  it("alert thresholds follow the bounds they watch: the container's memory limit, the audit buffer's bound", () => {
    const limitMiB = Number(/^(\d+)Mi$/.exec(String(at(podTemplate, "resources", "limits", "memory")))?.[1])
    expect(ruleExpr("AuthorDirectoryMemoryNearLimit")).toContain(`/ (${limitMiB} * 1024 * 1024) > 0.9`)
    // The compose replicas run under the same limit and heap as the pods.
    const app = services["app"]!
    expect(at(app, "deploy", "resources", "limits", "memory")).toBe(`${limitMiB}M`)
    const nodeOptions = podTemplate.env.find((e) => e.name === "NODE_OPTIONS")?.value
    expect(nodeOptions).toMatch(/^--max-old-space-size=\d+$/)
    expect(app.environment?.["NODE_OPTIONS"]).toBe(nodeOptions)
    const halfMiB = defaultWriterOptions.bufferMaxBytes / 2 / (1024 * 1024)
    expect(ruleExpr("AuthorDirectoryAuditBufferFilling")).toMatch(new RegExp(`> ${halfMiB} \\* 1024 \\* 1024$`))
  })

  it("the rules' unit tests feed every rule the series of both deployments, labelled as each scrapes them", () => {
    const tests = parse(readFileSync("deploy/prometheus/alerts.test.yml", "utf8")) as {
      rule_files: Array<string>
      tests: Array<{ input_series: Array<{ series: string }>; alert_rule_test: Array<{ alertname: string; exp_alerts: Array<unknown> }> }>
    }
    expect(tests.rule_files).toEqual(["alerts.yml"])
    // Every alert is seen firing in some test.
    const firing = new Set(tests.tests.flatMap((t) => t.alert_rule_test.filter((a) => a.exp_alerts.length > 0).map((a) => a.alertname)))
    expect([...firing].sort()).toEqual(rules.map((r) => r.alert).sort())
    const series = tests.tests.flatMap((t) => t.input_series.map((s) => s.series))
    const ours = series.filter((s) => s.includes(`${SERVICE_LABEL}="${SERVICE_NAME}"`))
    // Compose's series carry its job name; Kubernetes' a namespace and a pod; another service's series are there to be ignored.
    expect(ours.some((s) => s.includes(`job="author-directory"`) && !s.includes("namespace="))).toBe(true)
    expect(ours.some((s) => /namespace="[^"]+"/.test(s) && /pod="[^"]+"/.test(s))).toBe(true)
    expect(series.some((s) => !s.includes(`${SERVICE_LABEL}="${SERVICE_NAME}"`))).toBe(true)
    // The compose series' instances are on the admin port prometheus.yml scrapes.
    for (const s of ours) expect(s, s).toMatch(/instance="[^"]+:9464"/)
  })

  it.runIf(promtool)("`promtool test rules` passes the rules' unit tests, and `promtool check` accepts the rules and prometheus.yml", () => {
    const test = spawnSync("promtool", ["test", "rules", "alerts.test.yml"], { cwd: "deploy/prometheus", encoding: "utf8" })
    expect(test.stderr + test.stdout).toContain("SUCCESS")
    expect(test.status).toBe(0)
    const check = spawnSync("promtool", ["check", "rules", "--lint=all", "deploy/prometheus/alerts.yml"], { encoding: "utf8" })
    expect(check.stdout).toContain(`SUCCESS: ${rules.length} rules found`)
    expect(check.status).toBe(0)
    // prometheus.yml names the rules where the compose file mounts them: checked on a copy naming this checkout's file.
    const dir = mkdtempSync(join(tmpdir(), "ads-promtool-"))
    try {
      const config = join(dir, "prometheus.yml")
      writeFileSync(config, readFileSync("deploy/prometheus/prometheus.yml", "utf8").replace("/etc/prometheus/alerts.yml", resolve("deploy/prometheus/alerts.yml")))
      const result = spawnSync("promtool", ["check", "config", config], { encoding: "utf8" })
      expect(result.stdout).toContain("is valid prometheus config file syntax")
      expect(result.status).toBe(0)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it.runIf(promtool)("`promtool test rules` fails rules that select the compose job only (the Kubernetes cases) or no service at all (another service's series)", () => {
    const alerts = readFileSync("deploy/prometheus/alerts.yml", "utf8")
    for (const matcher of [`job="author-directory"`, `${SERVICE_LABEL}=~".+"`]) {
      const dir = mkdtempSync(join(tmpdir(), "ads-promtool-"))
      try {
        writeFileSync(join(dir, "alerts.yml"), alerts.replaceAll(`${SERVICE_LABEL}="${SERVICE_NAME}"`, matcher))
        writeFileSync(join(dir, "alerts.test.yml"), readFileSync("deploy/prometheus/alerts.test.yml", "utf8"))
        const result = spawnSync("promtool", ["test", "rules", "alerts.test.yml"], { cwd: dir, encoding: "utf8" })
        expect(result.status, matcher).not.toBe(0)
        expect(result.stdout + result.stderr, matcher).toContain("FAILED")
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    }
  })

  it("publishes neither PostgreSQL nor Redis on the host, and the development services on loopback only", () => {
    expect(services["postgres"]?.ports).toBeUndefined()
    expect(services["redis"]?.ports).toBeUndefined()
    for (const name of ["keycloak", "grafana", "prometheus", "jaeger", "otel-collector"]) {
      const ports = services[name]?.ports ?? []
      expect(ports.length, name).toBeGreaterThan(0)
      for (const port of ports) expect(port, name).toMatch(/^127\.0\.0\.1:\d+:\d+$/)
    }
  })

  it("pins every image to a version (no latest, no bare major or minor tag)", () => {
    for (const [name, service] of Object.entries(services)) {
      if (service["build"] !== undefined) continue
      const image = String(service["image"])
      const tag = /:([^:/@]+)(@sha256:[0-9a-f]{64})?$/.exec(image)?.[1]
      // PostgreSQL numbers its releases major.minor; everything else major.minor.patch.
      const version = name === "postgres" ? /^\d+\.\d+(-[a-z0-9.]+)?$/ : /^v?\d+\.\d+\.\d+(-[a-z0-9.]+)?$/
      expect(tag, `${name}: ${image}`).toMatch(version)
    }
  })

  it("runs two app instances behind the load balancer, which passes WebSocket upgrades and the client address", () => {
    const instances = Object.entries(services).filter(([name]) => /^app\d*$/.test(name))
    const replicas = instances.reduce((n, [, s]) => n + Number(at(s, "deploy", "replicas") ?? 1), 0)
    expect(replicas).toBeGreaterThanOrEqual(2)
    for (const [name, app] of instances) {
      expect(app.ports, `${name} is reached through the load balancer only`).toBeUndefined()
      expect(app.healthcheck?.test.join(" "), name).toMatch(/node -e fetch\(.*\/livez/)
    }
    const lb = services["lb"]!
    expect(lb["image"]).toMatch(/^nginx:/)
    expect(lb.ports).toEqual(["8000:8000"])
    expect(lb["volumes"]).toContain("./deploy/nginx/nginx.conf:/etc/nginx/nginx.conf:ro")
    const nginx = readFileSync("deploy/nginx/nginx.conf", "utf8").replace(/#.*$/gm, "")
    for (const name of instances.map(([n]) => n)) expect(nginx).toMatch(new RegExp(`server ${name}:8000\\b`))
    expect(nginx).toMatch(/listen 8000;/)
    const web = /location \/web \{([^}]*)\}/.exec(nginx)?.[1] ?? ""
    expect(web).toContain("proxy_pass http://")
    expect(nginx).toMatch(/proxy_http_version 1\.1;/)
    expect(web).toMatch(/proxy_set_header Upgrade \$http_upgrade;/)
    expect(web).toMatch(/proxy_set_header Connection \$connection_upgrade;/)
    expect(nginx).toMatch(/map \$http_upgrade \$connection_upgrade \{\s*default upgrade;/)
    expect(Number(/proxy_read_timeout (\d+)s;/.exec(web)?.[1])).toBeGreaterThanOrEqual(300)
    // proxy_set_header is not inherited into a location that sets its own: each proxied location sets X-Forwarded-For.
    for (const location of nginx.matchAll(/location [^{]+\{([^}]*)\}/g)) {
      if (location[1]!.includes("proxy_pass")) expect(location[1]).toMatch(/proxy_set_header X-Forwarded-For \$(remote_addr|proxy_add_x_forwarded_for);/)
    }
    // The app trusts the compose network (the fixed subnet the load balancer's address comes from).
    const subnet = String(at(composeFile.networks, "default", "ipam", "config", 0, "subnet"))
    expect(subnet).toMatch(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/)
    for (const [name, app] of instances) expect(app.environment?.["TRUSTED_PROXIES"], name).toBe(subnet)
  })

  it("restarts every service unless stopped and health-checks each one whose image can run a check", () => {
    for (const [name, service] of Object.entries(services)) {
      expect(service["restart"], name).toBe("unless-stopped")
      // The collector's image is the bare binary: nothing to run a check with (its comment says so).
      if (name !== "otel-collector") expect(service.healthcheck?.test.length, name).toBeGreaterThan(0)
    }
    expect(services["jaeger"]?.["image"]).toMatch(/^jaegertracing\/jaeger:2\./)
  })

  it.runIf(composeClient !== undefined)("is accepted by `docker compose config`", () => {
    const [command, ...args] = composeClient!
    // Compose v1 predates the top-level `name`; it is checked without it.
    const file = command === "docker-compose" ? "-" : "docker-compose.yml"
    const input = command === "docker-compose" ? compose.replace(/^name: .*\n/m, "") : undefined
    const result = spawnSync(command!, [...args, "-f", file, "--project-directory", ".", "config", "--quiet"], { input, encoding: "utf8" })
    expect(result.stderr).toBe("")
    expect(result.status).toBe(0)
  })
})
