-- inspect_many.lua: read several held locks of one bucket in one call (listings read
-- thousands at once). Changes nothing. One server and each Redlock node.
--
-- KEYS[1..n] locks   as for acquire.lua, all of one bucket (so of one hash slot)
-- Reply:   {server time ms, one entry per key}: {} when nobody holds that lock, else
--          {value, remaining lease ms} (value as inspect.lua returns it).
-- Effect:  none.
-- #include "include/now.lua"
local found = {now_ms}
for i, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value and string.sub(value, 1, 1) ~= '=' then
    found[i + 1] = {value, redis.call('PTTL', key)}
  else
    found[i + 1] = {}
  end
end
return found
