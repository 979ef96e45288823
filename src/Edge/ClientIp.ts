/**
 * Client address resolution: `X-Forwarded-For` is believed only when the direct peer is a
 * trusted proxy (`TRUSTED_PROXIES`: docs/errors-and-limits.md#http-rate-limit).
 */
import { isIP } from "node:net"
import { type Cidr, cidrContains, normalizeIp } from "../Domain/Cidr.ts"

/**
 * The client IP: the peer address, or — when the peer is a trusted proxy — the right-most
 * `X-Forwarded-For` entry that is not itself a trusted proxy.
 */
export const clientIp = (
  peer: string | undefined,
  forwardedFor: string | undefined,
  trusted: ReadonlyArray<Cidr>
): string => {
  const direct = normalizeIp(peer ?? "unknown")
  if (forwardedFor === undefined || trusted.length === 0) return direct
  const isTrusted = (ip: string) => trusted.some((c) => cidrContains(c, ip))
  if (!isTrusted(direct)) return direct
  const hops = forwardedFor.split(",").map((s) => normalizeIp(s)).filter((s) => isIP(s) !== 0)
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = hops[i]!
    if (!isTrusted(hop)) return hop
  }
  return hops[0] ?? direct
}
