/**
 * docs/configuration.md#redis-cluster-and-sentinel: how each mode's connection is made
 * (Store/Redis.ts `makeRedis`), read off the ioredis client without a server — credentials and TLS
 * reach every node in each mode (a cluster's nodes, found later, too), the Sentinels get their own
 * credentials and TLS, and a failover is followed by ioredis itself.
 */
import { Option, Redacted } from "effect"
import { Cluster, Redis } from "ioredis"
import { afterEach, describe, expect, it } from "vitest"
import type { RedisTarget, RedisTopology } from "../../src/Config/Redis.ts"
import { makeRedis, modeOf, type RedisConnection } from "../../src/Store/Redis.ts"

const made: Array<RedisConnection> = []
afterEach(() => {
  for (const client of made.splice(0)) client.disconnect()
})

/** A connection to nowhere reachable (port 1): only its options are looked at. */
const connection = (topology: RedisTopology, auth: Partial<Pick<RedisTarget, "username" | "password" | "tls">> = {}) => {
  const client = makeRedis({ topology, username: Option.none(), password: Option.none(), tls: false, ...auth })
  client.on("error", () => {})
  made.push(client)
  return client
}

const credentials = { username: Option.some("svc"), password: Option.some(Redacted.make("s3cret")), tls: true } as const

describe("makeRedis: one server", () => {
  it("REDIS_USERNAME / REDIS_PASSWORD / REDIS_TLS apply; credentials in the URL win", () => {
    const plain = connection({ _tag: "Single", url: Redacted.make("redis://127.0.0.1:1/3") }, credentials) as Redis
    expect(plain).toBeInstanceOf(Redis)
    expect(plain.options).toMatchObject({ username: "svc", password: "s3cret", db: 3, enableAutoPipelining: true, maxRetriesPerRequest: 1 })
    expect(plain.options.tls).toEqual({})
    const named = connection({ _tag: "Single", url: Redacted.make("redis://owner:fromurl@127.0.0.1:1/0") }, credentials) as Redis
    expect(named.options).toMatchObject({ username: "owner", password: "fromurl" })
    expect(modeOf(plain)).toBe("single")
  })
})

describe("makeRedis: Sentinel", () => {
  it("asks the Sentinels for the primary, with their own credentials, follows their failover announcements, and gives up on a silent Sentinel", () => {
    const client = connection({
      _tag: "Sentinel",
      sentinels: [{ host: "127.0.0.1", port: 1 }, { host: "::1", port: 2 }],
      master: "authors",
      sentinelUsername: Option.some("watcher"),
      sentinelPassword: Option.some(Redacted.make("sentinel-pw"))
    }, credentials) as Redis
    expect(client.options).toMatchObject({
      sentinels: [{ host: "127.0.0.1", port: 1 }, { host: "::1", port: 2 }],
      name: "authors",
      username: "svc",
      password: "s3cret",
      sentinelUsername: "watcher",
      sentinelPassword: "sentinel-pw",
      enableTLSForSentinelMode: true,
      sentinelTLS: {},
      tls: {},
      failoverDetector: true,
      sentinelCommandTimeout: 1000
    })
    expect(modeOf(client)).toBe("sentinel")
  })

  it("without Sentinel credentials none are sent (a Sentinel without a password refuses AUTH)", () => {
    const client = connection({ _tag: "Sentinel", sentinels: [{ host: "127.0.0.1", port: 1 }], master: "mymaster", sentinelUsername: Option.none(), sentinelPassword: Option.none() }) as Redis
    expect(client.options.sentinelPassword).toBeUndefined()
    expect(client.options.sentinelUsername).toBeUndefined()
    expect(client.options.tls).toBeUndefined()
  })
})

describe("makeRedis: Redis Cluster", () => {
  it("a Cluster whose every node gets the credentials and TLS, auto-pipelined, reaching TLS nodes by the names they announce", () => {
    const client = connection({ _tag: "Cluster", nodes: [{ host: "127.0.0.1", port: 1 }] }, credentials) as Cluster
    expect(client).toBeInstanceOf(Cluster)
    expect(client.options.redisOptions).toMatchObject({ username: "svc", password: "s3cret", tls: {}, maxRetriesPerRequest: 1 })
    expect(client.options).toMatchObject({ enableAutoPipelining: true, enableOfflineQueue: true, slotsRefreshInterval: 5000 })
    expect(client.options.shardedSubscribers).not.toBe(true) // only the subscriber connection holds those
    expect(typeof client.options.dnsLookup).toBe("function")
    expect(modeOf(client)).toBe("cluster")
    const plain = connection({ _tag: "Cluster", nodes: [{ host: "127.0.0.1", port: 1 }] }) as Cluster
    expect(plain.options.redisOptions?.tls).toBeUndefined()
  })
})
