-- extend.lua: extend a held lease (also for renewals and reentrant acquires). One server and
-- each Redlock node.
--
-- KEYS[1]  lock      as for acquire.lua
-- KEYS[2]  index     zset: the names held in the lock's bucket -> lease end (ms)
-- ARGV[1]  token     the holder's token
-- ARGV[2]  lease     the new lease, ms from now
-- ARGV[3]  name      the lock's name
-- ARGV[4]  renewal   '1' to count a renewal, else '0'
-- ARGV[5]  reenter   '1' to count one more reentrant level, else '0'
-- ARGV[6]  most      the most renewals one hold may have (OPTIONS['MAX_RENEWALS']), or ''
--                    for no limit
-- Reply:   1 when extended, 0 when the token does not hold the lock, 2 when a renewal was
--          refused because the hold already had ARGV[6] renewals (the lease is left as it
--          was).
-- Effect:  the lock's TTL set to the new lease (and its renewals or depth counted) and its
--          index entry moved to the new lease end.
-- #include "include/read.lua"
if holder ~= ARGV[1] then
  return 0
end
-- #include "include/count_renewal.lua"
-- #include "include/now.lua"
if ARGV[4] == '1' or ARGV[5] == '1' then
  redis.call('SET', KEYS[1],
    holder .. ' ' .. fence .. ' ' .. acquired .. ' ' .. renewals .. ' ' .. depth .. ' ' .. meta,
    'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('ZADD', KEYS[2], string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[3])
return 1
