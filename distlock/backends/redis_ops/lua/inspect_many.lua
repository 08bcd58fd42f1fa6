-- inspect_many.lua: read several held locks of one bucket in one call (listings read
-- thousands at once). Changes nothing. One server and each Redlock node.
--
-- KEYS[1..n] pairs   two keys per lock, its lock then its waiting zset (as inspect.lua's
--                    KEYS[1] and KEYS[2]), every lock of one bucket (so of one hash slot)
-- Reply:   {server time ms, one entry per lock}: {} when nobody holds that lock, else
--          {value, remaining lease ms, waiters} (as inspect.lua returns them).
-- Effect:  none.
-- #include "include/now.lua"
local found = {now_ms}
local after = '(' .. now_ms
for i = 1, #KEYS, 2 do
  local key = KEYS[i]
  local value = redis.call('GET', key)
  if value and string.sub(value, 1, 1) ~= '=' then
    found[#found + 1] = {value, redis.call('PTTL', key),
                         redis.call('ZCOUNT', KEYS[i + 1], after, '+inf')}
  else
    found[#found + 1] = {}
  end
end
return found
