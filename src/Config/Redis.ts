/**
 * Where the shared stores live (docs/configuration.md#redis-cluster-and-sentinel): one Redis
 * server (`REDIS_URL`), a Redis Cluster (`REDIS_CLUSTER_NODES`) or a Sentinel group
 * (`REDIS_SENTINELS`) — at most one of them — with the credentials and TLS that apply to whichever
 * it is. Config.ts reads it into `AppConfigShape.redis`; Store/Redis.ts connects to it.
 */
import { Config, Effect, Option, Redacted, Result } from "effect"
import { invalid, nonEmpty, nonEmptyRedacted } from "./Read.ts"

/** A `host:port` of a Redis Cluster seed or of a Sentinel. */
export interface RedisNode {
  readonly host: string
  readonly port: number
}

/**
 * How the service reaches Redis (docs/configuration.md#redis-cluster-and-sentinel), chosen by
 * which one of `REDIS_URL`, `REDIS_CLUSTER_NODES` or `REDIS_SENTINELS` is set.
 */
export type RedisTopology =
  | { readonly _tag: "Single"; readonly url: Redacted.Redacted<string> }
  | { readonly _tag: "Cluster"; readonly nodes: ReadonlyArray<RedisNode> }
  | {
    readonly _tag: "Sentinel"
    readonly sentinels: ReadonlyArray<RedisNode>
    readonly master: string
    /** The Sentinels' own credentials, when they require any (their ACL is not the data nodes'). */
    readonly sentinelUsername: Option.Option<string>
    readonly sentinelPassword: Option.Option<Redacted.Redacted<string>>
  }

/** The one value App.ts chooses the Redis layers by; credentials and TLS apply to every mode. */
export interface RedisTarget {
  readonly topology: RedisTopology
  /** ACL user (REDIS_USERNAME); a `REDIS_URL` that names one wins. */
  readonly username: Option.Option<string>
  readonly password: Option.Option<Redacted.Redacted<string>>
  /** TLS to every Redis node (and to the Sentinels); `rediss://` also turns it on for `REDIS_URL`. */
  readonly tls: boolean
}

/** One Redis server at `url`, no other credentials, no TLS beyond what the URL says. */
export const singleRedis = (url: Redacted.Redacted<string> | string): RedisTarget => ({
  topology: { _tag: "Single", url: typeof url === "string" ? Redacted.make(url) : url },
  username: Option.none(),
  password: Option.none(),
  tls: false
})

/** `host:port`, the host a name, an IPv4 address or a bracketed IPv6 address (`[::1]:6379`). */
const parseNode = (text: string): RedisNode | undefined => {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]]+):(\d{1,5})$/.exec(text)
  if (match === null) return undefined
  const port = Number(match[2])
  if (port < 1 || port > 65535) return undefined
  return { host: match[1]!.replace(/^\[|\]$/g, ""), port }
}

/** A comma-separated list of `host:port` (at least one). */
export const parseRedisNodes = (raw: string): Result.Result<ReadonlyArray<RedisNode>, string> => {
  const items = raw.split(",").map((s) => s.trim()).filter((s) => s !== "")
  const nodes = items.map(parseNode).filter((n) => n !== undefined)
  return items.length > 0 && nodes.length === items.length
    ? Result.succeed(nodes)
    : Result.fail("must be a comma-separated list of host:port")
}

/** The three ways to name Redis; more than one set is a mistake the service refuses. */
const REDIS_TARGET_SETTINGS = ["REDIS_URL", "REDIS_CLUSTER_NODES", "REDIS_SENTINELS"] as const

/** A list of `host:port`, or none when unset or empty. */
const optionalNodes = (name: string) =>
  nonEmpty(name).pipe(
    Config.mapEffect((raw) =>
      Option.match(raw, {
        onNone: () => Effect.succeed(Option.none<ReadonlyArray<RedisNode>>()),
        onSome: (text) =>
          Result.match(parseRedisNodes(text), {
            onSuccess: (nodes) => Effect.succeed(Option.some(nodes)),
            onFailure: (message) => Effect.fail(invalid(name, text, `${name} ${message}`))
          })
      })
    )
  )

/**
 * REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS (docs/configuration.md#redis-cluster-and-sentinel):
 * at most one of them, with the credentials and TLS that apply to whichever it is.
 */
export const redisTarget: Effect.Effect<Option.Option<RedisTarget>, Config.ConfigError> = Effect.gen(function*() {
  const url = yield* nonEmptyRedacted("REDIS_URL")
  const nodes = yield* optionalNodes("REDIS_CLUSTER_NODES")
  const sentinels = yield* optionalNodes("REDIS_SENTINELS")
  const present = [Option.isSome(url), Option.isSome(nodes), Option.isSome(sentinels)]
  const set = REDIS_TARGET_SETTINGS.filter((_, i) => present[i])
  if (set.length > 1) {
    return yield* Effect.fail(invalid(
      set[1]!,
      "<redacted>",
      `Set only one of REDIS_URL, REDIS_CLUSTER_NODES and REDIS_SENTINELS (one Redis server, a Redis Cluster, or a Sentinel group); found ${set.join(" and ")}`
    ))
  }
  const topology: Option.Option<RedisTopology> = Option.isSome(url)
    ? Option.some({ _tag: "Single", url: url.value })
    : Option.isSome(nodes)
    ? Option.some({ _tag: "Cluster", nodes: nodes.value })
    : Option.isSome(sentinels)
    ? Option.some({
      _tag: "Sentinel",
      sentinels: sentinels.value,
      master: yield* Config.String("REDIS_SENTINEL_MASTER").pipe(Config.withDefault("mymaster")),
      sentinelUsername: yield* nonEmpty("REDIS_SENTINEL_USERNAME"),
      sentinelPassword: yield* nonEmptyRedacted("REDIS_SENTINEL_PASSWORD")
    })
    : Option.none()
  const username = yield* nonEmpty("REDIS_USERNAME")
  const password = yield* nonEmptyRedacted("REDIS_PASSWORD")
  const tls = yield* Config.Boolean("REDIS_TLS").pipe(Config.withDefault(false))
  return Option.map(topology, (t): RedisTarget => ({ topology: t, username, password, tls }))
})
