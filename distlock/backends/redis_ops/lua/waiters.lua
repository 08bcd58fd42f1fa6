-- waiters.lua: list who waits for a lock, first come first (changes nothing). One server.
--
-- KEYS[1]  queue     zset: waiting token -> arrival (us), as acquire.lua's KEYS[3]
-- KEYS[2]  live      zset: waiting token -> when its registration ends (ms), as KEYS[4]
-- KEYS[3]  about     hash: waiting token -> its metadata JSON (KEYS[1] .. '|about')
-- ARGV[1]  limit     at most this many waiters are returned (the first ones)
-- Reply:   {server time ms, then for each waiter whose registration still runs, in arrival
--          order: arrival (us), metadata JSON ('' when not stored)}
-- Effect:  none.
-- #include "include/now.lua"
local reply = {now_ms}
local limit = tonumber(ARGV[1])
local listed = 0
local queued = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #queued, 2 do
  if listed >= limit then
    break
  end
  local alive = tonumber(redis.call('ZSCORE', KEYS[2], queued[i]))
  if alive and alive > now_ms then
    reply[#reply + 1] = queued[i + 1]
    reply[#reply + 1] = redis.call('HGET', KEYS[3], queued[i]) or ''
    listed = listed + 1
  end
end
return reply
