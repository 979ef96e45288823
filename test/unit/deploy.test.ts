/**
 * The observability deployment stays consistent with the code: the Grafana dashboard charts every
 * INTERFACE metric the service registers, Prometheus scrapes `/metrics` of the app service, the
 * collector receives OTLP/HTTP where the app sends it, and `docker compose config` accepts the file
 * (where a compose client is installed).
 */
import { spawnSync } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { registry } from "../../src/Observability/Metrics.ts"

const INTERFACE_METRICS = [
  "http_requests_total", "http_request_duration_seconds", "http_requests_in_progress", "ws_connections_active",
  "ws_connections_total", "ws_messages_received_total", "ws_messages_sent_total", "ws_message_processing_duration_seconds",
  "db_query_duration_seconds", "db_connections_active", "db_errors_total", "rate_limit_hits_total", "auth_attempts_total",
  "token_validation_total", "app_info"
]

const compose = readFileSync("docker-compose.yml", "utf8")

const composeClient = (() => {
  if (spawnSync("docker", ["compose", "version"]).status === 0) return ["docker", "compose"]
  if (spawnSync("docker-compose", ["version"]).status === 0) return ["docker-compose"]
  return undefined
})()

describe("observability deployment", () => {
  it("charts every INTERFACE metric on the provisioned dashboard, and the service registers each", () => {
    const dashboard = JSON.parse(readFileSync("deploy/grafana/dashboards/author-directory.json", "utf8")) as {
      panels: Array<{ targets: Array<{ expr: string }> }>
    }
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)).join("\n")
    for (const name of INTERFACE_METRICS) {
      expect(exprs, name).toContain(name)
      expect(registry.getSingleMetric(name), name).toBeDefined()
    }
    const datasource = readFileSync("deploy/grafana/provisioning/datasources/prometheus.yml", "utf8")
    expect(datasource).toContain("uid: prometheus")
    expect(datasource).toContain("url: http://prometheus:9090")
  })

  it("scrapes the app's /metrics and sends spans to the collector's OTLP/HTTP receiver", () => {
    const prometheus = readFileSync("deploy/prometheus/prometheus.yml", "utf8")
    expect(prometheus).toContain("metrics_path: /metrics")
    expect(prometheus).toContain(`targets: ["app:8000"]`)
    const collector = readFileSync("deploy/otel/collector.yaml", "utf8")
    expect(collector).toMatch(/http:\s*\n\s*endpoint: 0\.0\.0\.0:4318/)
    expect(compose).toContain("OTEL_EXPORTER_OTLP_ENDPOINT: http://otel-collector:4318")
    for (const service of ["otel-collector:", "jaeger:", "prometheus:", "grafana:"]) expect(compose).toContain(`\n  ${service}`)
    // Every file the compose file mounts from deploy/ exists.
    for (const [, path] of compose.matchAll(/- \.\/(deploy\/[^:]+):/g)) expect(existsSync(path!), path).toBe(true)
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
