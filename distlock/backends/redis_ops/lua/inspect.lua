-- inspect.lua: read a held lock (changes nothing). One server and each Redlock node.
--
-- KEYS[1]  lock      as for acquire.lua
-- KEYS[2]  waiting   zset: waiting token -> when its registration ends (ms): live for one
--                    server (acquire.lua's KEYS[4]), waiters on a Redlock node
-- Reply:   {} when nobody holds the lock (also while it is handed to a waiter), {'~'} while
--          shared holders hold it (shared_inspect.lua reads them), else {value, remaining
--          lease ms, server time ms, waiters}: value as acquire.lua stores it, waiters the
--          tokens whose registration still runs.
-- Effect:  none.
-- #include "include/now.lua"
local value = redis.call('GET', KEYS[1])
if value == '=~' then
  return {'~'}
end
if not value or string.sub(value, 1, 1) == '=' then
  return {}
end
return {value, redis.call('PTTL', KEYS[1]), now_ms,
        redis.call('ZCOUNT', KEYS[2], '(' .. now_ms, '+inf')}
