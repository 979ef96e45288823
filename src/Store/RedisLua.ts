/**
 * Lua shared by the scripts that keep generations (the read cache's, Authors/SharedGenerations.ts;
 * read by the rate check, RateLimit/RedisRateLimiter.ts): values that never repeat, even after
 * Redis lost or rolled back its keys.
 */

/**
 * Lua: the function `next_generation(value)`, the value a generation takes after `value` (its
 * current one, or false when missing): the larger of `value + 1` and Redis's clock in µs. So a value
 * is never issued twice, even after Redis lost a key or went back to older values (a restart from
 * a snapshot, a failover to a replica that lagged, a hand edit): the clock has moved past every
 * value issued before, as long as Redis's clock (the new primary's, after a failover) is not behind
 * the clock of any earlier bump, and no key is bumped more than once a microsecond on average (a
 * key bumped faster runs ahead of the clock, and a rollback could meet its values again). Values
 * stay below 2^53 (exact in Lua's numbers) until the year 2255. The read cache's generations
 * (Authors/SharedGenerations.ts `BUMP_LUA`).
 */
export const nextGenerationLua = `local clock_now = redis.call('TIME')
clock_now = tonumber(clock_now[1]) * 1000000 + tonumber(clock_now[2])
local function next_generation(value)
  local n = tonumber(value or '0') + 1
  if n < clock_now then n = clock_now end
  return string.format('%.0f', n)
end
`

/**
 * Lua: `local <name> = GET <key>`, and when the key is missing it is first set to Redis's clock in
 * µs, as `next_generation` would: a reader of a lost key never sees a value issued before.
 */
export const clockCounterLua = (name: string, key: string) => `local ${name} = redis.call('GET', ${key})
if not ${name} then
  local clock = redis.call('TIME')
  ${name} = clock[1] .. string.format('%06d', tonumber(clock[2]))
  redis.call('SET', ${key}, ${name})
end
`

/**
 * Lua: `local <name>` = the *generations record* at hash `<key>`, read as one value
 * `rows.count.high`: `rows` and `count` are generations like `clockCounterLua`'s (a missing one is
 * first set to Redis's clock in µs), `high` a mark that only its writer sets (missing: 0). One hash,
 * so a flush or an eviction loses all three together. The read cache keeps the list's generations
 * this way (Authors/ReadCache.ts).
 */
export const clockRecordLua = (name: string, key: string) => `local ${name}_r = redis.call('HMGET', ${key}, 'rows', 'count', 'high')
if not ${name}_r[1] or not ${name}_r[2] then
  local clock = redis.call('TIME')
  local start = clock[1] .. string.format('%06d', tonumber(clock[2]))
  if not ${name}_r[1] then ${name}_r[1] = start; redis.call('HSET', ${key}, 'rows', start) end
  if not ${name}_r[2] then ${name}_r[2] = start; redis.call('HSET', ${key}, 'count', start) end
end
local ${name} = ${name}_r[1] .. '.' .. ${name}_r[2] .. '.' .. (${name}_r[3] or '0')
`
