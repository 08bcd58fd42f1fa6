-- shared_inspect.lua: read the shared holders of a lock (changes nothing).
--
-- KEYS[1]  lock      as for shared_acquire.lua
-- KEYS[2]  readers   as for shared_acquire.lua
-- KEYS[3]  holders   as for shared_acquire.lua
-- KEYS[4]  live      as for shared_acquire.lua (how many wait: tokens still registered)
-- Reply:   {} when no shared holder holds the lock (it is free, held exclusively, or only
--          reserved for waiters), else {server time ms, waiters, token, fields, lease end ms,
--          token, ...}: each holder whose lease has not ended, first lease to end first;
--          fields as shared_acquire.lua stores them; waiters as inspect.lua counts them.
-- Effect:  none.
-- #include "include/now.lua"
if redis.call('GET', KEYS[1]) ~= '=~' then
  return {}
end
local found = {now_ms, redis.call('ZCOUNT', KEYS[4], '(' .. now_ms, '+inf')}
local entries = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_ms, '+inf', 'WITHSCORES')
for i = 1, #entries, 2 do
  local fields = redis.call('HGET', KEYS[3], entries[i])
  if fields then
    found[#found + 1] = entries[i]
    found[#found + 1] = fields
    found[#found + 1] = entries[i + 1]
  end
end
if #found == 2 then
  return {}
end
return found
