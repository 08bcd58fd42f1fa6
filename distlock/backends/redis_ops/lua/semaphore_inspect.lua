-- semaphore_inspect.lua: read a semaphore (changes nothing).
--
-- KEYS[1..7] semaphore  the semaphore's seven keys, as semaphore_acquire.lua lists them
-- Reply:   {} when nobody holds or waits for a permit, else {limit, server time ms, waiting,
--          reserved, then for each holder whose lease runs, first to end first: token, lease
--          end ms, metadata, acquired ms, permit number, renewals}.
-- Effect:  none.
-- #include "include/now.lua"
local holders = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
local waiting = redis.call('ZCOUNT', KEYS[4], '(' .. now_ms, '+inf')
if #holders == 0 and waiting == 0 then
  return {}
end
local reply = {redis.call('HGET', KEYS[2], 'limit') or '0', now_ms, waiting,
               redis.call('ZCOUNT', KEYS[5], '(' .. now_ms, '+inf')}
for i = 1, #holders, 2 do
  local t = holders[i]
  local f = redis.call('HMGET', KEYS[2], 'm:' .. t, 'a:' .. t, 'f:' .. t, 'r:' .. t)
  for _, value in ipairs({t, holders[i + 1], f[1] or '', f[2] or '0', f[3] or '0',
                          f[4] or '0'}) do
    reply[#reply + 1] = value
  end
end
return reply
