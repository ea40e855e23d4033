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
