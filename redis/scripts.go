package redis

import goredis "github.com/redis/go-redis/v9"

// Stream entry fields. An entry holds the envelope, encoded with
// bus.MarshalEnvelope, and, once the transport handed it back to the stream,
// how many times it did.
const (
	fieldEnvelope = "e"
	fieldRequeues = "r"
)

// publishScript adds an event to the stream of every queue subscribed to its
// type, in one step: either every subscriber gets it or none does.
//
//	KEYS[1] the subscriber set of the type
//	ARGV[1] the key prefix of queue streams ("<prefix>:q:")
//	ARGV[2] the encoded envelope
//	ARGV[3] MaxLen (0: no cap)
//
// It returns how many streams received the event.
var publishScript = goredis.NewScript(`
local subs = redis.call('SMEMBERS', KEYS[1])
local cap = tonumber(ARGV[3])
for _, q in ipairs(subs) do
  if cap > 0 then
    redis.call('XADD', ARGV[1] .. q, 'MAXLEN', '~', cap, '*', 'e', ARGV[2])
  else
    redis.call('XADD', ARGV[1] .. q, '*', 'e', ARGV[2])
  end
end
return #subs
`)

// requeueScript hands messages this consumer still owns back to the stream:
// each is added again at the end of the stream (same envelope, requeue count
// plus one) and the original is acknowledged and deleted, atomically. A
// message another consumer took over meanwhile is left alone.
//
//	KEYS[1] the stream
//	ARGV[1] the group, ARGV[2] the consumer, ARGV[3] MaxLen (0: no cap)
//	ARGV[4...] entry IDs
//
// It returns how many messages it handed back.
var requeueScript = goredis.NewScript(`
local n = 0
local cap = tonumber(ARGV[3])
for i = 4, #ARGV do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2])
  if #p == 1 then
    local e = redis.call('XRANGE', KEYS[1], id, id)
    if #e == 1 then
      local f = e[1][2]
      local env, r = nil, 0
      for j = 1, #f, 2 do
        if f[j] == 'e' then env = f[j + 1] elseif f[j] == 'r' then r = tonumber(f[j + 1]) or 0 end
      end
      if env then
        if cap > 0 then
          redis.call('XADD', KEYS[1], 'MAXLEN', '~', cap, '*', 'e', env, 'r', r + 1)
        else
          redis.call('XADD', KEYS[1], '*', 'e', env, 'r', r + 1)
        end
      end
    end
    redis.call('XACK', KEYS[1], ARGV[1], id)
    redis.call('XDEL', KEYS[1], id)
    n = n + 1
  end
end
return n
`)

// renewScript renews this consumer's claim on messages it holds (XCLAIM
// JUSTID resets their idle time without counting a delivery) and returns
// the IDs it no longer owns: another consumer took them over.
//
//	KEYS[1] the stream
//	ARGV[1] the group, ARGV[2] the consumer
//	ARGV[3...] entry IDs
var renewScript = goredis.NewScript(`
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2])
  if #p == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
  else
    lost[#lost + 1] = id
  end
end
return lost
`)

// retireScript deletes the consumer from the group if it holds no message
// (XGROUP DELCONSUMER would drop the messages it holds).
//
//	KEYS[1] the stream
//	ARGV[1] the group, ARGV[2] the consumer
//
// It returns 1 when the consumer was deleted.
var retireScript = goredis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
`)
