-- semaphore_extend.lua: extend a held permit's lease (also for renewals).
--
-- KEYS[1..7] semaphore  the semaphore's seven keys, as semaphore_acquire.lua lists them
-- ARGV[1]  token     the holder's token
-- ARGV[2]  lease     the new lease, ms from now
-- ARGV[3]  renewal   '1' to count a renewal, else '0'
-- ARGV[4]  most      the most renewals one hold may have (OPTIONS['MAX_RENEWALS']), or ''
--                    for no limit
-- ARGV[5]  grace     ms a woken waiter has to claim the permit reserved for it
-- ARGV[6]  name      the semaphore's name
-- Reply:   1 when extended, 0 when the token holds no permit, 2 when the renewal was refused
--          at ARGV[4] renewals (the lease is left as it was).
-- Effect:  the semaphore settled (semaphore_settle.lua); the permit's lease end moved (and
--          a renewal counted); the keys' lifetimes and the index kept (semaphore_tidy.lua).
-- #include "include/now.lua"
local name, grace = ARGV[6], tonumber(ARGV[5])
local limit = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0')
-- #include "include/semaphore_settle.lua"
local t = ARGV[1]
local outcome = 0
if redis.call('ZSCORE', KEYS[1], t) then
  local renewals = tonumber(redis.call('HGET', KEYS[2], 'r:' .. t) or '0')
  if ARGV[3] == '1' and ARGV[4] ~= '' and renewals >= tonumber(ARGV[4]) then
    outcome = 2
  else
    redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now_ms + tonumber(ARGV[2])), t)
    if ARGV[3] == '1' then
      redis.call('HINCRBY', KEYS[2], 'r:' .. t, 1)
    end
    outcome = 1
  end
end
-- #include "include/semaphore_tidy.lua"
return outcome
