/**
 * What the Redis connection registry (RedisRegistry.ts) exchanges with Redis and with the other
 * instances: the slot scripts (RedisSlots.ts), which measure leases on Redis's clock (instances
 * whose clocks differ still agree on when a lease ends), and the broadcast channel's messages
 * (RedisBroadcasts.ts), checked before they are delivered (anyone who can reach Redis can publish
 * on the channel).
 */
import { Result, Schema } from "effect"
import { BroadcastData } from "./Protocol.ts"
import type { BroadcastMessage } from "./RegistryBase.ts"

/** Redis's clock in ms; effects replication (the default since Redis 5) lets a script read it and then write. */
const REDIS_NOW_LUA = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

/** KEYS[1] = the user's slots; ARGV = lease (ms), max, member. Returns 1 when admitted. */
export const ACQUIRE_SLOT_LUA = `${REDIS_NOW_LUA}
local key = KEYS[1]
local lease = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
local member = ARGV[3]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if not redis.call('ZSCORE', key, member) and redis.call('ZCARD', key) >= max then return 0 end
redis.call('ZADD', key, now + lease, member)
redis.call('PEXPIRE', key, lease)
return 1
`

/**
 * KEYS[1] = one user's slots; ARGV = lease (ms), max, then this instance's members for the user.
 * Extends the leases still there; puts back a missing one only while fewer than max are counted.
 * Returns the members that did not fit.
 */
export const RENEW_SLOTS_LUA = `${REDIS_NOW_LUA}
local key = KEYS[1]
local lease = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local left = {}
for i = 3, #ARGV do
  if redis.call('ZSCORE', key, ARGV[i]) or redis.call('ZCARD', key) < max then
    redis.call('ZADD', key, now + lease, ARGV[i])
  else
    left[#left + 1] = ARGV[i]
  end
end
if redis.call('ZCARD', key) > 0 then redis.call('PEXPIRE', key, lease) end
return left
`

/** A broadcast larger than this is not one of ours (a name is at most 255 characters). */
const MAX_BROADCAST_BYTES = 16 * 1024

const decodeBroadcast = Schema.decodeUnknownResult(BroadcastData)

/** A message from the broadcast channel, if it is a valid broadcast (extra fields are dropped). */
export const parseBroadcast = (text: string): BroadcastMessage | string => {
  if (text.length > MAX_BROADCAST_BYTES) return `larger than ${MAX_BROADCAST_BYTES} bytes`
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return "not JSON"
  }
  const decoded = decodeBroadcast(value)
  return Result.isSuccess(decoded) ? decoded.success : `not a broadcast: ${String(decoded.failure)}`
}
