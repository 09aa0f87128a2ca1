package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts of the failed-message store. A failed message is a hash at
// <tag>:f:<id> in the partition of its ID:
//
//	ty type   ep endpoint   q queue   k kind   rs reason   g group
//	at attempts   n failures   ff first failed, ns   lf last failed, ns
//	e  the envelope
//
// and is in the partition's indexes scored by its last failure in µs:
// <tag>:fl (all), <tag>:fg:<group>, <tag>:ft:<type> and <tag>:fe:<endpoint>;
// <tag>:ff:<group> scores the group's messages by their first failure, and
// <tag>:fgs is the set of the partition's groups.

// luaFailed holds the helpers of the failed-message scripts.
const luaFailed = `
local function lessNs(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function us(ns)
  if #ns <= 3 then return '0' end
  return string.sub(ns, 1, -4)
end
local function unindex(tag, id, f)
  redis.call('ZREM', tag .. ':fl', id)
  redis.call('ZREM', tag .. ':fg:' .. f[1], id)
  redis.call('ZREM', tag .. ':ff:' .. f[1], id)
  redis.call('ZREM', tag .. ':ft:' .. f[2], id)
  redis.call('ZREM', tag .. ':fe:' .. f[3], id)
end
local function index(tag, id, group, typ, ep, first, last)
  redis.call('ZADD', tag .. ':fl', us(last), id)
  redis.call('ZADD', tag .. ':fg:' .. group, us(last), id)
  redis.call('ZADD', tag .. ':ff:' .. group, us(first), id)
  redis.call('ZADD', tag .. ':ft:' .. typ, us(last), id)
  redis.call('ZADD', tag .. ':fe:' .. ep, us(last), id)
  redis.call('SADD', tag .. ':fgs', group)
end
local fields = {'ty', 'ep', 'q', 'k', 'rs', 'g', 'at', 'n', 'ff', 'lf', 'e'}
`

// failedStoreScript stores failures (see bus.FailedStore.StoreFailed).
//
//	ARGV[1+12i..] id, type, endpoint, queue, kind, reason, group,
//	attempts, failures, first ns, last ns, envelope
var failedStoreScript = goredis.NewScript(luaFailed + `
local tag = KEYS[1]
for i = 1, #ARGV, 12 do
  local id = ARGV[i]
  local key = tag .. ':f:' .. id
  local first, last = ARGV[i + 9], ARGV[i + 10]
  local cur = redis.call('HMGET', key, 'g', 'ty', 'ep', 'ff', 'lf', 'n')
  if not cur[5] then
    redis.call('HSET', key, 'ty', ARGV[i + 1], 'ep', ARGV[i + 2], 'q', ARGV[i + 3], 'k', ARGV[i + 4], 'rs', ARGV[i + 5],
      'g', ARGV[i + 6], 'at', ARGV[i + 7], 'n', ARGV[i + 8], 'ff', first, 'lf', last, 'e', ARGV[i + 11])
    index(tag, id, ARGV[i + 6], ARGV[i + 1], ARGV[i + 2], first, last)
  elseif cur[5] ~= last then
    local ff = cur[4]
    if lessNs(first, ff) then ff = first end
    redis.call('HSET', key, 'n', tonumber(cur[6]) + 1, 'ff', ff)
    if lessNs(cur[5], last) then
      unindex(tag, id, cur)
      redis.call('HSET', key, 'ty', ARGV[i + 1], 'ep', ARGV[i + 2], 'q', ARGV[i + 3], 'k', ARGV[i + 4], 'rs', ARGV[i + 5],
        'g', ARGV[i + 6], 'at', ARGV[i + 7], 'lf', last, 'e', ARGV[i + 11])
      index(tag, id, ARGV[i + 6], ARGV[i + 1], ARGV[i + 2], ff, last)
    else
      redis.call('ZADD', tag .. ':ff:' .. cur[1], us(ff), id)
    end
  end
end
return 1
`)

// failedScanScript lists (ARGV[1] "list") or counts ("count") the
// messages of the index KEYS[2] that match, most recent failure first.
//
//	ARGV[2] limit, ARGV[3] before µs ("+inf": none), ARGV[4] before ns
//	("": no keyset), ARGV[5] before ID, ARGV[6] group, ARGV[7] type,
//	ARGV[8] endpoint, ARGV[9] ID ("" for any)
//
// A list returns 12 values per message: the ID, then the fields above.
var failedScanScript = goredis.NewScript(luaFailed + `
local list, limit = ARGV[1] == 'list', tonumber(ARGV[2])
local out, n, offset = {}, 0, 0
while (not list) or n < limit do
  local ids = redis.call('ZRANGE', KEYS[2], ARGV[3], '-inf', 'BYSCORE', 'REV', 'LIMIT', offset, 1000)
  if #ids == 0 then break end
  offset = offset + #ids
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', KEYS[1] .. ':f:' .. id, 'g', 'ty', 'ep', 'lf')
    local ok = f[4] and (ARGV[6] == '' or f[1] == ARGV[6]) and (ARGV[7] == '' or f[2] == ARGV[7]) and
      (ARGV[8] == '' or f[3] == ARGV[8]) and (ARGV[9] == '' or id == ARGV[9])
    if ok and ARGV[4] ~= '' then
      ok = lessNs(f[4], ARGV[4]) or (f[4] == ARGV[4] and id < ARGV[5])
    end
    if ok and (not list or n < limit) then
      n = n + 1
      if list then
        out[#out + 1] = id
        for _, v in ipairs(redis.call('HMGET', KEYS[1] .. ':f:' .. id, unpack(fields))) do out[#out + 1] = v or '' end
      end
    end
  end
end
if list then return out end
return n
`)

// failedGetScript returns the message ARGV[1] as 12 values, or {}.
var failedGetScript = goredis.NewScript(luaFailed + `
local f = redis.call('HMGET', KEYS[1] .. ':f:' .. ARGV[1], unpack(fields))
if not f[10] then return {} end
local out = {ARGV[1]}
for _, v in ipairs(f) do out[#out + 1] = v or '' end
return out
`)

// failedGroupsScript returns the partition's groups, 7 values each:
// group, count, type, endpoint, reason, first failed ns, last failed ns.
var failedGroupsScript = goredis.NewScript(luaFailed + `
local out = {}
for _, g in ipairs(redis.call('SMEMBERS', KEYS[1] .. ':fgs')) do
  local count = redis.call('ZCARD', KEYS[1] .. ':fg:' .. g)
  if count == 0 then
    redis.call('SREM', KEYS[1] .. ':fgs', g)
  else
    local latest = redis.call('ZRANGE', KEYS[1] .. ':fg:' .. g, 0, 0, 'REV')[1]
    local earliest = redis.call('ZRANGE', KEYS[1] .. ':ff:' .. g, 0, 0)[1]
    local l = redis.call('HMGET', KEYS[1] .. ':f:' .. latest, 'ty', 'ep', 'rs', 'lf')
    local first = redis.call('HGET', KEYS[1] .. ':f:' .. earliest, 'ff')
    out[#out + 1] = g
    out[#out + 1] = count
    for k = 1, 3 do out[#out + 1] = l[k] or '' end
    out[#out + 1] = first or ''
    out[#out + 1] = l[4] or ''
  end
end
return out
`)

// failedDeleteScript deletes the messages ARGV[1…] and returns how many
// there were.
var failedDeleteScript = goredis.NewScript(luaFailed + `
local n = 0
for i = 1, #ARGV do
  local key = KEYS[1] .. ':f:' .. ARGV[i]
  local cur = redis.call('HMGET', key, 'g', 'ty', 'ep')
  if cur[1] then
    unindex(KEYS[1], ARGV[i], cur)
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
`)

func init() {
	storeScripts = append(storeScripts, failedStoreScript, failedScanScript, failedGetScript, failedGroupsScript, failedDeleteScript)
}
