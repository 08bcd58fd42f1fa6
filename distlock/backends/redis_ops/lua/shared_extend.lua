-- shared_extend.lua: extend a shared holder's lease (also for renewals and reentrant
-- acquires).
--
-- KEYS[1]  lock      as for shared_acquire.lua
-- KEYS[2]  index     the bucket's shared index, as for shared_acquire.lua
-- KEYS[3]  readers   as for shared_acquire.lua
-- KEYS[4]  holders   as for shared_acquire.lua
-- ARGV[1]  token     the holder's token
-- ARGV[2]  lease     the new lease, ms from now
-- ARGV[3]  name      the lock's name
-- ARGV[4]  renewal   '1' to count a renewal, else '0'
-- ARGV[5]  reenter   '1' to count one more reentrant level, else '0'
-- ARGV[6]  most      the most renewals one hold may have (OPTIONS['MAX_RENEWALS']), or ''
-- Reply:   as extend.lua's: 1 when extended, 0 when the token holds no shared place (any
--          more), 2 when a renewal was refused at ARGV[6] renewals.
-- Effect:  the holder's lease set to the new one (its renewals or depth counted), holders
--          whose lease ended dropped, and the lock's key, the shared keys and the index
--          entry made to last until the last lease ends.
-- #include "include/now.lua"
local lock_key, readers_key, rmeta_key, shared_index = KEYS[1], KEYS[3], KEYS[4], KEYS[2]
local name = ARGV[3]
-- #include "include/shared_keys.lua"
-- #include "include/shared_hold.lua"
local fence, acquired, renewals, depth, meta = string.match(held, '^(%S+) (%S+) (%S+) (%S+) (.*)$')
-- #include "include/count_renewal.lua"
redis.call('HSET', rmeta_key, ARGV[1],
  fence .. ' ' .. acquired .. ' ' .. renewals .. ' ' .. depth .. ' ' .. meta)
redis.call('ZADD', readers_key, string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[1])
prune_readers()
settle_readers()
return 1
