/**
 * The observability deployment stays consistent with the code: the Grafana dashboard charts every
 * INTERFACE metric the service registers (each panel filtered by the `instance` variable), Prometheus
 * scrapes `/metrics` of every app replica and loads alert rules on the service's own metrics, the
 * collector receives OTLP/HTTP where the app sends it, the compose stack runs two replicas behind a
 * WebSocket-capable load balancer with PostgreSQL and Redis unpublished, and `docker compose config`
 * accepts the file (where a compose client is installed).
 */
import { spawnSync } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { parse } from "yaml"
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
 * The metric selectors of a PromQL expression that do not filter on `instance=~"$instance"`: every
 * identifier that is not a function (followed by `(`), a keyword, in a label list (`by (...)`) or
 * inside a selector's braces must carry a selector with that matcher.
 */
const unfilteredSelectors = (expr: string): Array<string> => {
  const stripped = expr.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, "")
  const missing: Array<string> = []
  for (const m of stripped.matchAll(/([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?(\s*\()?/g)) {
    const [, name, selector, call] = m
    if (call !== undefined || PROMQL_KEYWORDS.has(name!.toLowerCase())) continue
    if (/^\d/.test(name!) || (m.index > 0 && /[\d.]$/.test(stripped.slice(0, m.index)))) continue // 1e-9
    if (!selector?.includes(`instance=~"$instance"`)) missing.push(name!)
  }
  return missing
}

const at = (value: unknown, ...path: Array<string | number>): unknown =>
  path.reduce<unknown>((v, k) => (v as Record<string | number, unknown> | undefined)?.[k], value)

const composeClient = (() => {
  if (spawnSync("docker", ["compose", "version"]).status === 0) return ["docker", "compose"]
  if (spawnSync("docker-compose", ["version"]).status === 0) return ["docker-compose"]
  return undefined
})()

describe("observability deployment", () => {
  it("charts every INTERFACE metric on the provisioned dashboard, and the service registers each", () => {
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

  it("scrapes every app replica's /metrics and sends spans to the collector's OTLP/HTTP receiver", () => {
    const job = prometheusConfig.scrape_configs.find((c) => c.job_name === "author-directory")!
    expect(job["metrics_path"]).toBe("/metrics")
    // Either DNS discovery of the scaled `app` service (every replica's address) or a static target per instance.
    const dns = job.dns_sd_configs?.find((c) => c.names.includes("app"))
    const staticTargets = (job.static_configs ?? []).flatMap((c) => c.targets)
    const instances = Object.keys(services).filter((name) => /^app\d*$/.test(name))
    if (dns !== undefined) expect(dns).toMatchObject({ type: "A", port: 8000 })
    else for (const name of instances) expect(staticTargets, name).toContain(`${name}:8000`)
    const collector = readFileSync("deploy/otel/collector.yaml", "utf8")
    expect(collector).toMatch(/http:\s*\n\s*endpoint: 0\.0\.0\.0:4318/)
    expect(compose).toContain("OTEL_EXPORTER_OTLP_ENDPOINT: http://otel-collector:4318")
    for (const service of ["otel-collector:", "jaeger:", "prometheus:", "grafana:"]) expect(compose).toContain(`\n  ${service}`)
    // Every file the compose file mounts from deploy/ exists.
    for (const [, path] of compose.matchAll(/- \.\/(deploy\/[^:]+):/g)) expect(existsSync(path!), path).toBe(true)
  })

  it("loads alert rules on the service's metrics: 5xx rate, p99 latency, audit drops, rate-limit store, database, instance down", () => {
    expect(existsSync("deploy/prometheus/alerts.yml")).toBe(true)
    // prometheus.yml loads the file from where the compose file mounts it.
    expect(prometheusConfig.rule_files).toContain("/etc/prometheus/alerts.yml")
    expect(services["prometheus"]?.["volumes"]).toContain("./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro")
    const rules = (parse(readFileSync("deploy/prometheus/alerts.yml", "utf8")) as { groups: Array<{ rules: Array<Json> }> })
      .groups.flatMap((g) => g.rules)
    for (const rule of rules) {
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
      "instance down": /^up(\{[^}]*\})? == 0$/
    }
    for (const [condition, pattern] of Object.entries(conditions)) {
      expect(exprs.some((e) => pattern.test(e)), condition).toBe(true)
    }
    // Every metric an alert names is one the service registers (or Prometheus' own `up`).
    for (const name of new Set(exprs.join(" ").match(/\b[a-z_]+_(total|bucket)\b/g))) {
      expect(registry.getSingleMetric(name.replace(/_bucket$/, "")), name).toBeDefined()
    }
  })

  it("publishes neither PostgreSQL nor Redis on the host", () => {
    expect(services["postgres"]?.ports).toBeUndefined()
    expect(services["redis"]?.ports).toBeUndefined()
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
