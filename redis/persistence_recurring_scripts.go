package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts of the recurring store. A schedule's record is a hash at
// <tag>:r:<name> in the partition of its name:
//
//	f   fingerprint ("" for a deleted record's tombstone)   s  schedule text
//	g   generation      p  paused (0 or 1)      q  write sequence
//	l   last, ns ("" for none)   tk  ticks, ns, comma-separated
//	al  liveness mark, ns   hs  1 when it has a Spec   sp  the Spec
//	d   due, ns   r  runs   sk  skipped
//	pd  the rows of an advance still to store and cancel (JSON), with
//	pw  when that advance was written, µs on the server's clock
//
// <tag>:rn holds the names of the live records of the partition (a sorted
// set, all scores 0, so that it pages by name) and <tag>:rd the runtime
// records (with a Spec) scored by their due time in µs.
//
// Every script that changes a record first checks pd: an advance whose
// rows are not stored yet comes first, and the script returns
// {"pending", pw, now} for the caller to wait or finish it.

// luaRecord is the preamble of the record scripts.
const luaRecord = luaNow + `
local key = KEYS[1] .. ':r:' .. ARGV[1]
local function pending()
  local pd = redis.call('HMGET', key, 'pd', 'pw')
  if pd[1] then return {'pending', pd[2], num(now)} end
  return nil
end
local function runtimeIndex()
  local r = redis.call('HMGET', key, 'hs', 'd')
  if r[1] == '1' and r[2] and r[2] ~= '' then
    local us = '0'
    if #r[2] > 3 then us = string.sub(r[2], 1, -4) end
    redis.call('ZADD', KEYS[1] .. ':rd', us, ARGV[1])
  else
    redis.call('ZREM', KEYS[1] .. ':rd', ARGV[1])
  end
end
`

// recDeclareScript declares a record.
//
//	ARGV[1] name, ARGV[2] fingerprint, ARGV[3] schedule, ARGV[4] has spec
//	(0/1), ARGV[5] spec, ARGV[6] due ns ("" for none)
//
// It returns {"same"|"changed", fields…} (HGETALL of the record).
var recDeclareScript = goredis.NewScript(luaRecord + `
local p = pending()
if p then return p end
local cur = redis.call('HMGET', key, 'f', 'g', 'q')
local status = 'changed'
if not cur[1] or cur[1] == '' then
  redis.call('DEL', key)
  redis.call('HSET', key, 'f', ARGV[2], 's', ARGV[3], 'g', (tonumber(cur[2]) or 0) + 1, 'p', 0,
    'q', (tonumber(cur[3]) or 0) + 1, 'l', '', 'tk', '', 'al', '', 'hs', ARGV[4], 'sp', ARGV[5], 'd', ARGV[6],
    'r', 0, 'sk', 0)
  redis.call('ZADD', KEYS[1] .. ':rn', 0, ARGV[1])
elseif cur[1] == ARGV[2] then
  status = 'same'
else
  redis.call('HSET', key, 'f', ARGV[2], 's', ARGV[3], 'g', tonumber(cur[2]) + 1, 'q', tonumber(cur[3]) + 1,
    'hs', ARGV[4], 'sp', ARGV[5], 'd', ARGV[6])
end
runtimeIndex()
local out = {status}
for _, v in ipairs(redis.call('HGETALL', key)) do out[#out + 1] = v end
return out
`)

// recAdvanceScript is the compare-and-set of an advance.
//
//	ARGV[1] name, ARGV[2] generation, ARGV[3] fingerprint, ARGV[4] paused,
//	ARGV[5] from ns, ARGV[6] last ns, ARGV[7] ticks, ARGV[8] alive ns,
//	ARGV[9] due ns, ARGV[10] runs, ARGV[11] skipped, ARGV[12] pending rows
//	("" for none)
//
// It returns {"ok", seq} or {"moved"}.
var recAdvanceScript = goredis.NewScript(luaRecord + `
local p = pending()
if p then return p end
local cur = redis.call('HMGET', key, 'f', 'g', 'p', 'l', 'al', 'q')
if not cur[1] or cur[1] == '' or cur[2] ~= ARGV[2] or cur[1] ~= ARGV[3] or cur[3] ~= ARGV[4] or cur[4] ~= ARGV[5] then
  return {'moved'}
end
local q = tonumber(cur[6]) + 1
redis.call('HSET', key, 'l', ARGV[6], 'tk', ARGV[7], 'd', ARGV[9], 'r', ARGV[10], 'sk', ARGV[11], 'q', q)
local al, new = cur[5] or '', ARGV[8]
if new ~= '' and (al == '' or #new > #al or (#new == #al and new > al)) then
  redis.call('HSET', key, 'al', new)
end
if ARGV[12] ~= '' then
  redis.call('HSET', key, 'pd', ARGV[12], 'pw', num(now))
end
runtimeIndex()
return {'ok', q}
`)

// recDoneScript ends the pending advance of write seq ARGV[2].
var recDoneScript = goredis.NewScript(luaRecord + `
if redis.call('HGET', key, 'q') == ARGV[2] then redis.call('HDEL', key, 'pd', 'pw') end
return 1
`)

// recPauseScript pauses (ARGV[2] 1) or resumes (0) a record at ARGV[3]
// ns. It returns {"ok"} or {"none"}.
var recPauseScript = goredis.NewScript(luaRecord + `
local p = pending()
if p then return p end
local cur = redis.call('HMGET', key, 'f', 'l', 'q')
if not cur[1] or cur[1] == '' then return {'none'} end
redis.call('HSET', key, 'p', ARGV[2], 'd', ARGV[3], 'q', tonumber(cur[3]) + 1)
local l, at = cur[2] or '', ARGV[3]
if ARGV[2] == '0' and (l == '' or #l < #at or (#l == #at and l < at)) then
  redis.call('HSET', key, 'l', at)
end
runtimeIndex()
return {'ok'}
`)

// recDeleteScript replaces a record by its tombstone. It returns {"ok"} or
// {"none"}.
var recDeleteScript = goredis.NewScript(luaRecord + `
local p = pending()
if p then return p end
local cur = redis.call('HMGET', key, 'f', 'g', 'q')
if not cur[1] or cur[1] == '' then return {'none'} end
redis.call('DEL', key)
redis.call('HSET', key, 'f', '', 'g', cur[2], 'q', tonumber(cur[3]) + 1)
redis.call('ZREM', KEYS[1] .. ':rn', ARGV[1])
redis.call('ZREM', KEYS[1] .. ':rd', ARGV[1])
return {'ok'}
`)

// recGetScript returns {now µs, fields…} of a record.
var recGetScript = goredis.NewScript(luaRecord + `
local out = {num(now)}
for _, v in ipairs(redis.call('HGETALL', key)) do out[#out + 1] = v end
return out
`)

// recClaimScript moves the Due of the named runtime records that are still
// due at ARGV[1] µs to ARGV[2] ns (and the index to ARGV[3] µs).
//
//	ARGV[4…] names
//
// It returns the records it moved, each as its name, a count of values
// and the values (HGETALL, as they were before the move).
var recClaimScript = goredis.NewScript(`
local out = {}
for i = 4, #ARGV do
  local name = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1] .. ':rd', name)
  if s and tonumber(s) <= tonumber(ARGV[1]) then
    local key = KEYS[1] .. ':r:' .. name
    local all = redis.call('HGETALL', key)
    redis.call('HSET', key, 'd', ARGV[2])
    redis.call('ZADD', KEYS[1] .. ':rd', ARGV[3], name)
    out[#out + 1] = name
    out[#out + 1] = #all
    for _, v in ipairs(all) do out[#out + 1] = v end
  end
end
return out
`)

// runBeginScript begins the run ARGV[2] of schedule ARGV[1] until ARGV[4]
// µs unless another run's until is after ARGV[3] µs. It returns 1 when
// the run began.
var runBeginScript = goredis.NewScript(`
local key = KEYS[1] .. ':run:' .. ARGV[1]
local cur = redis.call('HMGET', key, 'i', 'u')
if cur[1] and cur[1] ~= ARGV[2] and tonumber(cur[2]) > tonumber(ARGV[3]) then return 0 end
redis.call('HSET', key, 'i', ARGV[2], 'u', ARGV[4])
local ttl = math.floor((tonumber(ARGV[4]) - tonumber(ARGV[3])) / 1000) + 3600000
if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
return 1
`)

// runEndScript ends the run ARGV[2] of schedule ARGV[1], if it is the one
// under way.
var runEndScript = goredis.NewScript(`
local key = KEYS[1] .. ':run:' .. ARGV[1]
if redis.call('HGET', key, 'i') == ARGV[2] then redis.call('DEL', key) end
return 1
`)

func init() {
	storeScripts = append(storeScripts, recDeclareScript, recAdvanceScript, recDoneScript, recPauseScript,
		recDeleteScript, recGetScript, recClaimScript, runBeginScript, runEndScript)
}
