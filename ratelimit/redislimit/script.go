package redislimit

import "github.com/redis/go-redis/v9"

// gcraScript is GCRA on one Redis key, run atomically on the server with the
// server's clock, in one round trip.
//
// The key holds the theoretical arrival time (TAT) in microseconds of the
// server's TIME, as a decimal with three fractional digits (1 ns). Lua
// numbers are doubles, which resolve only 0.25 us at ~1.8e15 us since 1970,
// so the script computes relative to floor(now): it parses the stored TAT's
// integer and fractional parts separately, subtracts the integer parts
// exactly, and writes the result back the same way.
//
//	KEYS[1]  the key
//	ARGV[1]  emission interval T in microseconds (may be fractional)
//	ARGV[2]  burst B (the tolerance is B·T)
//	ARGV[3]  want: how many to grant at most
//	ARGV[4]  need: how many to grant at least (need <= want); fewer is a rejection
//	ARGV[5]  optional: "now" in microseconds instead of TIME, for tests that
//	         compare the script with the in-process GCRA on one arrival
//	         sequence; the Limiter never passes it. With it, the key's
//	         TTL is an hour: a TTL measured on a fake clock would expire
//	         keys by the real one
//
// It returns {granted, retry_after_us, remaining}. granted is between need and
// want on admission and 0 on rejection; retry_after_us is the wait until need
// would be granted (-1 when need > B can never be granted); remaining is what
// could still be granted at once afterwards, between 0 and B. An admission sets the key with a
// TTL equal to the time its TAT needs to fall back to the present, so an idle
// key vanishes exactly when it becomes identical to a missing one.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if ARGV[5] then now = tonumber(ARGV[5]) end
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local need = tonumber(ARGV[4])
local tol = burst * interval
-- Times are computed relative to base = floor(now): near 1.8e15 a double
-- only resolves 0.25 us, so a sub-microsecond interval added to an absolute
-- time vanished. The stored TAT is split at its decimal point so that the
-- integer part is subtracted exactly.
local base = math.floor(now)
now = now - base
local tat = now
local s = redis.call('GET', KEYS[1])
if s then
  local ip, fp = string.match(s, '^(%d+)(%.?%d*)$')
  if ip then tat = (tonumber(ip) - base) + tonumber('0' .. fp) end
end
if tat < now then tat = now end
local avail = math.floor((now + tol - tat) / interval + 1e-9)
-- What can be granted at once lies between 0 and the burst: a TAT rounded up
-- to 1 ns, or a server clock that stepped back, can leave it more than the
-- tolerance ahead of now, which gave a negative count.
if avail < 0 then avail = 0 end
if avail > burst then avail = burst end
if need > burst then
  return {0, -1, avail}
end
if avail < need then
  local wait = tat + need * interval - tol - now
  return {0, math.ceil(wait), avail}
end
local g = want
if g > avail then g = avail end
local newtat = tat + g * interval
local ttl = math.ceil((newtat - now) / 1000)
if ttl < 1 then ttl = 1 end
if ARGV[5] then ttl = 3600000 end
local ipart = math.floor(newtat)
local frac = math.floor((newtat - ipart) * 1000 + 0.5)
if frac >= 1000 then ipart = ipart + 1; frac = 0 end
redis.call('SET', KEYS[1], string.format('%.0f.%03d', base + ipart, frac), 'PX', ttl)
return {g, 0, avail - g}
`)

// The sorted-set scripts below (a Semaphore's leases, a Replicas group)
// score each member by its expiry in microseconds of the server's TIME and
// remove the expired ones (score <= now) before they count or renew, so an
// expired member is gone whether or not anyone has purged it yet. Scores
// are written with string.format('%.0f'): Redis converts a Lua number
// argument with 14 significant digits, which would round a time of
// ~1.8e15 µs to 10 ms. After each write the key expires with its latest
// member (PEXPIREAT of the top score), so an idle set vanishes and a
// member with a longer TTL written by another process is never cut short.

// expireWithTop is the Lua that sets KEYS[1]'s expiry to its top score.
const expireWithTop = `
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] then
  redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', math.ceil(tonumber(top[2]) / 1000) + 1))
end
`

// purgeExpired is the Lua that reads the server's clock into now (µs) and
// removes the members of KEYS[1] that expired at or before it.
const purgeExpired = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
`

// semAcquireScript takes one lease of a Semaphore if fewer than max are
// held.
//
//	KEYS[1]  the semaphore's sorted set of leases
//	ARGV[1]  the lease token (random, one per Acquire)
//	ARGV[2]  max, the budget
//	ARGV[3]  the lease's TTL in microseconds
//
// It returns {granted (0 or 1), leases held afterwards}. A token already in
// the set (go-redis retrying a call whose first attempt ran) is renewed and
// granted again: one token is never counted twice.
var semAcquireScript = redis.NewScript(purgeExpired + `
local exp = string.format('%.0f', now + tonumber(ARGV[3]))
local n = redis.call('ZCARD', KEYS[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if n >= tonumber(ARGV[2]) then
    return {0, n}
  end
  n = n + 1
end
redis.call('ZADD', KEYS[1], exp, ARGV[1])
` + expireWithTop + `
return {1, n}
`)

// semRenewScript renews a batch of one process's leases and removes
// others that it gave up (releases that failed, acquires that timed out).
//
//	KEYS[1]                   the semaphore's sorted set of leases
//	ARGV[1]                   the TTL in microseconds
//	ARGV[2]                   r, how many tokens to renew
//	ARGV[3] .. ARGV[2+r]      the tokens to renew
//	ARGV[3+r] ..              the tokens to remove
//
// It returns the 1-based positions, among the r tokens, of the leases that
// had expired (or were never granted): they are not renewed, never
// revived, since another process may already hold their place.
var semRenewScript = redis.NewScript(purgeExpired + `
local exp = string.format('%.0f', now + tonumber(ARGV[1]))
local r = tonumber(ARGV[2])
local lost = {}
for i = 3, 2 + r do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', exp, ARGV[i])
  else
    lost[#lost + 1] = i - 2
  end
end
for i = 3 + r, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
end
` + expireWithTop + `
return lost
`)

// heartbeatScript renews one replica's member of a Replicas group and
// counts the live members.
//
//	KEYS[1]  the group's sorted set
//	ARGV[1]  this replica's ID
//	ARGV[2]  the heartbeat's TTL in microseconds
//
// It returns how many members have not expired, this one included.
var heartbeatScript = redis.NewScript(purgeExpired + `
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
` + expireWithTop + `
return redis.call('ZCARD', KEYS[1])
`)
