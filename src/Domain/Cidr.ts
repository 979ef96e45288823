/**
 * IP addresses and CIDR ranges: what `TRUSTED_PROXIES` holds (Config.ts) and what the edge matches
 * a peer against (Edge/ClientIp.ts). Kept rather than `effect/net/IpNetwork`, whose strict parser
 * refuses what the setting accepts today: a bare address (`10.0.0.1`) and host bits (`10.0.0.1/8`).
 */
import { Result } from "effect"
import { isIP } from "node:net"

export interface Cidr {
  readonly family: 4 | 6
  readonly bits: bigint
  readonly prefix: number
}

/** IPv4-mapped IPv6 (`::ffff:1.2.3.4`) is reported as plain IPv4 (the audit's `ip_address`). */
export const normalizeIp = (ip: string): string => {
  const trimmed = ip.trim()
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(trimmed)
  return mapped?.[1] ?? trimmed
}

const toBits = (ip: string): { family: 4 | 6; bits: bigint } | undefined => {
  const addr = normalizeIp(ip)
  const family = isIP(addr)
  if (family === 4) {
    const bits = addr.split(".").reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n)
    return { family: 4, bits }
  }
  if (family === 6) {
    const [head = "", tail = ""] = addr.split("::")
    const parse = (s: string) => (s === "" ? [] : s.split(":"))
    const h = parse(head)
    const t = addr.includes("::") ? parse(tail) : []
    const groups = addr.includes("::") ? [...h, ...Array(8 - h.length - t.length).fill("0"), ...t] : h
    if (groups.length !== 8) return undefined
    const bits = groups.reduce((acc: bigint, g: string) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n)
    return { family: 6, bits }
  }
  return undefined
}

export const parseCidr = (text: string): Cidr | undefined => {
  const [addr = "", prefixText] = text.trim().split("/")
  const parsed = toBits(addr)
  if (parsed === undefined) return undefined
  const max = parsed.family === 4 ? 32 : 128
  const prefix = prefixText === undefined ? max : Number(prefixText)
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) return undefined
  return { family: parsed.family, bits: parsed.bits, prefix }
}

export const parseCidrList = (raw: string): Result.Result<ReadonlyArray<Cidr>, string> => {
  const parts = raw.split(",").map((s) => s.trim()).filter((s) => s !== "")
  const out: Array<Cidr> = []
  for (const part of parts) {
    const cidr = parseCidr(part)
    if (cidr === undefined) return Result.fail(`has an invalid CIDR: ${JSON.stringify(part)}`)
    out.push(cidr)
  }
  return Result.succeed(out)
}

export const cidrContains = (cidr: Cidr, ip: string): boolean => {
  const parsed = toBits(ip)
  if (parsed === undefined || parsed.family !== cidr.family) return false
  const width = BigInt(cidr.family === 4 ? 32 : 128)
  const shift = width - BigInt(cidr.prefix)
  return (parsed.bits >> shift) === (cidr.bits >> shift)
}
