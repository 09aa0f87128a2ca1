package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts of the scheduled browser (see persistence_scripts.go for the
// keys).

// luaRow is a helper that returns the fields of a row as a browser reads
// them: id, envelope, kind, type, transport, due ns, failures, last error,
// claimable from µs, lease end µs, token.
const luaRow = `
local function row(key, id)
  local r = redis.call('HMGET', key, 'e', 'k', 't', 'tr', 'd', 'f', 'le', 'a', 'l', 'tok')
  if not r[1] then return nil end
  local out = {id}
  for k = 1, 10 do out[#out + 1] = r[k] or '' end
  return out
end
-- lessNs compares two non-negative integers written in decimal.
local function lessNs(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
`

// browseListScript returns up to limit rows of the partition by due time
// then ID, as 11 fields each (see luaRow).
//
//	KEYS[1] the partition's key prefix, KEYS[2] the due index to read
//	(<tag>:du or <tag>:dt:<type>)
//	ARGV[1] from µs, ARGV[2] before µs ("+inf": none, exclusive),
//	ARGV[3] after due ns ("": no keyset), ARGV[4] after ID, ARGV[5] limit
var browseListScript = goredis.NewScript(luaRow + `
local out, n, offset = {}, 0, 0
local limit = tonumber(ARGV[5])
local stop = ARGV[2]
if stop ~= '+inf' then stop = '(' .. stop end
while n < limit do
  local ids = redis.call('ZRANGE', KEYS[2], ARGV[1], stop, 'BYSCORE', 'LIMIT', offset, limit)
  if #ids == 0 then break end
  offset = offset + #ids
  for _, id in ipairs(ids) do
    local r = row(KEYS[1] .. ':m:' .. id, id)
    if r and n < limit then
      local due = r[6]
      if ARGV[3] == '' or lessNs(ARGV[3], due) or (due == ARGV[3] and id > ARGV[4]) then
        for _, v in ipairs(r) do out[#out + 1] = v end
        n = n + 1
      end
    end
  end
end
return out
`)

// browseGetScript returns the row ARGV[1] (see luaRow), or an empty list.
var browseGetScript = goredis.NewScript(luaRow + `
return row(KEYS[1] .. ':m:' .. ARGV[1], ARGV[1]) or {}
`)

// browseStatsScript returns the partition's row count, its rows claimable
// now (capped at ARGV[1]), and the claimable-from time (µs) and due time
// (ns) of the row claimable longest ("" when none).
var browseStatsScript = goredis.NewScript(luaNow + `
local count = redis.call('ZCARD', KEYS[1] .. ':du')
local overdue, best, bestID, bestDue = 0, nil, nil, ''
for _, tr in ipairs(redis.call('SMEMBERS', KEYS[1] .. ':trs')) do
  local z = KEYS[1] .. ':z:' .. tr
  overdue = overdue + redis.call('ZCOUNT', z, '-inf', num(now))
  local first = redis.call('ZRANGE', z, '-inf', num(now), 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if #first > 0 and (best == nil or tonumber(first[2]) < best) then
    best, bestID = tonumber(first[2]), first[1]
  end
end
if overdue > tonumber(ARGV[1]) then overdue = tonumber(ARGV[1]) end
if bestID then bestDue = redis.call('HGET', KEYS[1] .. ':m:' .. bestID, 'd') or '' end
local b = ''
if best then b = num(best) end
return {count, overdue, b, bestDue}
`)

// browseHistogramScript counts the partition's rows due in each of ARGV[3]
// buckets of ARGV[2] µs from ARGV[1] µs.
var browseHistogramScript = goredis.NewScript(`
local from, width, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 0, n - 1 do
  local lo = from + i * width
  out[#out + 1] = redis.call('ZCOUNT', KEYS[1] .. ':du', string.format('%.0f', lo), '(' .. string.format('%.0f', lo + width))
end
return out
`)

// sendNowScript makes a row that no running lease holds due now. It
// returns 1 when it did.
var sendNowScript = goredis.NewScript(luaNow + `
local key = KEYS[1] .. ':m:' .. ARGV[1]
local r = redis.call('HMGET', key, 'tr', 'tok', 'l', 't')
if not r[1] then return 0 end
if r[2] and tonumber(r[3]) > now then return 0 end
redis.call('HSET', key, 'd', num(now) .. '000', 'a', num(now))
redis.call('HDEL', key, 'tok', 'l', 'pa')
redis.call('ZADD', KEYS[1] .. ':z:' .. r[1], num(now), ARGV[1])
redis.call('ZADD', KEYS[1] .. ':du', num(now), ARGV[1])
redis.call('ZADD', KEYS[1] .. ':dt:' .. r[4], num(now), ARGV[1])
return 1
`)

func init() {
	storeScripts = append(storeScripts, browseListScript, browseGetScript, browseStatsScript, browseHistogramScript, sendNowScript)
}
