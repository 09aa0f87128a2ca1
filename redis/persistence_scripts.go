package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts of the scheduled-message store. Each runs on one partition:
// every key it touches starts with the partition's hash tag, so on Redis
// Cluster it runs on one slot of one node, atomically. Times are integer
// microseconds since the Unix epoch, read from the server with TIME: a
// double holds them exactly (nanoseconds would not fit), and Lua numbers
// are doubles. A row's due time in nanoseconds is kept as the string the
// client sent and never computed with in Lua.
//
// A row is a hash at <tag>:m:<id>:
//
//	e   the envelope          k  kind       t  type       tr  transport
//	d   due, ns (string)      a  claimable from, µs       pa  a before the running lease
//	l   lease end, µs         tok  lease token            f   failures   le  last error
//
// and an entry of the partition's sorted set of its transport,
// <tag>:z:<transport>, scored by a (claimable from). A claim moves the
// score to the lease end, so a row whose claimant died is claimable again
// when its lease lapses. For operators (ScheduledBrowser) a row is also in
// <tag>:du, scored by its due time in µs, and in <tag>:dt:<type>, the same
// for its message type; <tag>:trs is the set of the partition's
// transports.

// luaNow is the preamble of every script: now, in microseconds, on the
// server's clock.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function num(x) return string.format('%.0f', x) end
`

// storeScript stores rows that are not stored yet.
//
//	KEYS[1] the partition's key prefix ("{tag}")
//	ARGV[1+7i..] id, envelope, kind, type, transport, due ns, due µs
//	(rounded up)
//
// It returns the earliest claimable time of the rows it stored, in µs, or
// -1.
var storeScript = goredis.NewScript(luaNow + `
local earliest = -1
for i = 1, #ARGV, 7 do
  local id = ARGV[i]
  local key = KEYS[1] .. ':m:' .. id
  if redis.call('EXISTS', key) == 0 then
    local due, a = ARGV[i + 5], tonumber(ARGV[i + 6])
    redis.call('HSET', key, 'e', ARGV[i + 1], 'k', ARGV[i + 2], 't', ARGV[i + 3], 'tr', ARGV[i + 4],
      'd', due, 'a', num(a), 'f', 0)
    redis.call('ZADD', KEYS[1] .. ':z:' .. ARGV[i + 4], num(a), id)
    redis.call('ZADD', KEYS[1] .. ':du', num(a), id)
    redis.call('ZADD', KEYS[1] .. ':dt:' .. ARGV[i + 3], num(a), id)
    redis.call('SADD', KEYS[1] .. ':trs', ARGV[i + 4])
    if earliest < 0 or a < earliest then earliest = a end
  end
end
return num(earliest)
`)

// peekScript returns the rows a claim would take first: up to limit rows
// claimable by now + ahead, earliest first, as id, score pairs, after now.
//
//	KEYS[1] the sorted set of the transport, KEYS[2] that of rows without
//	one (or KEYS[1] again)
//	ARGV[1] ahead µs, ARGV[2] limit
var peekScript = goredis.NewScript(luaNow + `
local by = now + tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local out = {num(now)}
local a = redis.call('ZRANGE', KEYS[1], '-inf', num(by), 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local b = {}
if KEYS[2] ~= KEYS[1] then
  b = redis.call('ZRANGE', KEYS[2], '-inf', num(by), 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
end
local i, j = 1, 1
while #out - 1 < 2 * limit and (i <= #a or j <= #b) do
  local takeA
  if i > #a then takeA = false
  elseif j > #b then takeA = true
  else
    local sa, sb = tonumber(a[i + 1]), tonumber(b[j + 1])
    takeA = sa < sb or (sa == sb and a[i] < b[j])
  end
  if takeA then
    out[#out + 1] = a[i]; out[#out + 1] = a[i + 1]; i = i + 2
  else
    out[#out + 1] = b[j]; out[#out + 1] = b[j + 1]; j = j + 2
  end
end
return out
`)

// claimScript leases up to limit rows claimable by min(now + ahead, cap),
// earliest first, until now + ahead + lease, under token.
//
//	KEYS[1] the partition's key prefix, KEYS[2] the sorted set of the
//	transport, KEYS[3] that of rows without one (or KEYS[2] again)
//	ARGV[1] ahead µs, ARGV[2] lease µs, ARGV[3] limit, ARGV[4] cap µs
//	("+inf": none), ARGV[5] token
//
// It returns now, then 9 fields per row: id, envelope, kind, type,
// transport, due ns, failures, last error, claimable from (µs).
var claimScript = goredis.NewScript(luaNow + `
local by = now + tonumber(ARGV[1])
if ARGV[4] ~= '+inf' and tonumber(ARGV[4]) < by then by = tonumber(ARGV[4]) end
local untl = now + tonumber(ARGV[1]) + tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local a = redis.call('ZRANGE', KEYS[2], '-inf', num(by), 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local b = {}
if KEYS[3] ~= KEYS[2] then
  b = redis.call('ZRANGE', KEYS[3], '-inf', num(by), 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
end
local out = {num(now)}
local i, j, n = 1, 1, 0
while n < limit and (i <= #a or j <= #b) do
  local id, score, z
  local takeA
  if i > #a then takeA = false
  elseif j > #b then takeA = true
  else
    local sa, sb = tonumber(a[i + 1]), tonumber(b[j + 1])
    takeA = sa < sb or (sa == sb and a[i] < b[j])
  end
  if takeA then id, score, z = a[i], a[i + 1], KEYS[2]; i = i + 2
  else id, score, z = b[j], b[j + 1], KEYS[3]; j = j + 2 end
  local key = KEYS[1] .. ':m:' .. id
  local r = redis.call('HMGET', key, 'e', 'k', 't', 'tr', 'd', 'f', 'le')
  if r[1] then
    redis.call('HSET', key, 'pa', score, 'a', num(untl), 'l', num(untl), 'tok', ARGV[5])
    redis.call('ZADD', z, num(untl), id)
    out[#out + 1] = id
    for k = 1, 7 do out[#out + 1] = r[k] or '' end
    out[#out + 1] = score
    n = n + 1
  else
    redis.call('ZREM', z, id)
  end
end
return out
`)

// settleScript deletes, releases or fails the rows their tokens still hold.
//
//	KEYS[1] the partition's key prefix
//	ARGV[1] "delete", "release" or "fail"
//	ARGV[2+5i..] id, token, error, retry after µs, retry at µs
//
// It returns how many rows it changed.
var settleScript = goredis.NewScript(luaNow + `
local op = ARGV[1]
local n = 0
for i = 2, #ARGV, 5 do
  local id = ARGV[i]
  local key = KEYS[1] .. ':m:' .. id
  local r = redis.call('HMGET', key, 'tok', 'tr', 'pa', 't')
  if r[1] and r[1] == ARGV[i + 1] then
    local z = KEYS[1] .. ':z:' .. r[2]
    if op == 'delete' then
      redis.call('DEL', key)
      redis.call('ZREM', z, id)
      redis.call('ZREM', KEYS[1] .. ':du', id)
      redis.call('ZREM', KEYS[1] .. ':dt:' .. r[4], id)
    else
      local a = r[3]
      if op == 'fail' then
        local after = tonumber(ARGV[i + 3])
        if after > 0 then a = num(now + after) else a = ARGV[i + 4] end
        redis.call('HINCRBY', key, 'f', 1)
        redis.call('HSET', key, 'le', ARGV[i + 2])
      end
      redis.call('HSET', key, 'a', a)
      redis.call('HDEL', key, 'tok', 'l', 'pa')
      redis.call('ZADD', z, a, id)
    end
    n = n + 1
  end
end
return n
`)

// cancelScript removes a row unless its lease is running.
//
//	KEYS[1] the partition's key prefix, ARGV[1] the id
//
// It returns 1 when it removed the row.
var cancelScript = goredis.NewScript(luaNow + `
local key = KEYS[1] .. ':m:' .. ARGV[1]
local r = redis.call('HMGET', key, 'tr', 'tok', 'l', 't')
if not r[1] then return 0 end
if r[2] and tonumber(r[3]) > now then return 0 end
redis.call('DEL', key)
redis.call('ZREM', KEYS[1] .. ':z:' .. r[1], ARGV[1])
redis.call('ZREM', KEYS[1] .. ':du', ARGV[1])
redis.call('ZREM', KEYS[1] .. ':dt:' .. r[4], ARGV[1])
return 1
`)

// timeScript returns the server's now in µs, on the node of KEYS[1].
var timeScript = goredis.NewScript(luaNow + `
return num(now)
`)

// storeScripts are loaded at Setup.
var storeScripts = []*goredis.Script{storeScript, peekScript, claimScript, settleScript, cancelScript, timeScript}
