-- held_names.lua: list the names held in one bucket. One server and each Redlock node.
--
-- KEYS[1]  index     zset: the names held in the bucket -> lease end (ms); its key ends in
--                    ':held', and the bucket's lock keys start with what precedes it,
--                    followed by ':lock:' and the percent-encoded name
-- ARGV[1]  waiting   the kind of the zset of each lock's waiters by registration end, named
--                    like its lock key: 'live' on one server, 'wait' on a Redlock node
-- Reply:   a flat list: name, lease end (ms), acquired (ms), waiters (registrations still
--          running), name, ... for each name whose lock is held (not only handed to a
--          waiter).
-- Effect:  index entries whose lease has ended are dropped (in chunks of 1000: Lua's
--          unpack() takes at most a few thousand values).
-- #include "include/now.lua"
local ended = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
for first = 1, #ended, 1000 do
  redis.call('ZREM', KEYS[1], unpack(ended, first, math.min(first + 999, #ended)))
end
local tag = string.sub(KEYS[1], 1, -6)
local base = tag .. ':lock:'
local waiting = tag .. ':' .. ARGV[1] .. ':'
local after = '(' .. now_ms
local found = {}
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  -- The lock's key: the name percent-encoded as distlock.names.encode_name does.
  local encoded = string.gsub(entries[i], '[^%w%-%._~:/@%+=,]', function(c)
    return string.format('%%%02X', string.byte(c))
  end)
  local value = redis.call('GET', base .. encoded)
  local since = value and string.match(value, '^[^=]%S* %S+ (%S+) ')
  if since then
    found[#found + 1] = entries[i]
    found[#found + 1] = entries[i + 1]
    found[#found + 1] = since
    found[#found + 1] = redis.call('ZCOUNT', waiting .. encoded, after, '+inf')
  end
end
return found
