/**
 * How two answers to one request are compared (bench/lib/parity.ts): a success (2xx) by status and
 * body, the opaque `next_cursor` only as present or null and volatile fields by their format; an
 * error by status only. No imports beyond node: the unit suite loads it on its own.
 */
import { isDeepStrictEqual } from "node:util"

export interface Answer {
  readonly status: number
  readonly body: unknown
  readonly headers?: Readonly<Record<string, string | null>>
}

/** A server's answer as compared: `next_cursor` reduced to whether it is there, volatile fields to whether they have their format. */
export const normalize = (body: unknown, volatile: Readonly<Record<string, RegExp>> = {}): unknown => {
  if (Array.isArray(body)) return body.map((b) => normalize(b, volatile))
  if (typeof body !== "object" || body === null) return body
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(body)) {
    if (k === "next_cursor") out[k] = v === null ? null : typeof v === "string" && v !== "" ? "<cursor>" : v
    else if (volatile[k] !== undefined) out[k] = typeof v === "string" && volatile[k].test(v) ? `<${k}>` : v
    else out[k] = normalize(v, volatile)
  }
  return out
}

export const RATE_LIMIT_HEADERS = ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]
const short = (u: unknown) => JSON.stringify(u)?.slice(0, 240)

/** The differences between two answers to one request (empty when they agree). */
export const compareAnswers = (label: string, service: Answer, baseline: Answer, volatile: Readonly<Record<string, RegExp>> = {}): Array<string> => {
  if (service.status !== baseline.status) return [`${label}: status ${service.status} (service) vs ${baseline.status} (baseline)`]
  const problems: Array<string> = []
  const ok = service.status >= 200 && service.status < 300
  if (ok) {
    const [a, b] = [normalize(service.body, volatile), normalize(baseline.body, volatile)]
    if (!isDeepStrictEqual(a, b)) problems.push(`${label}: bodies differ: service ${short(a)} vs baseline ${short(b)}`)
  }
  for (const [name, answer] of [["service", service], ["baseline", baseline]] as const) {
    if (answer.headers === undefined) continue
    if (answer.headers["x-correlation-id"] !== "bench-parity") problems.push(`${label}: ${name} did not echo the correlation id`)
    const missing = ok ? ["x-request-id", ...RATE_LIMIT_HEADERS].filter((h) => answer.headers![h] == null) : []
    if (missing.length > 0) problems.push(`${label}: ${name} answered without ${missing.join(", ")}`)
  }
  return problems
}
