-- shared_leave.lua: a shared waiter gives up waiting.
--
-- KEYS[1]  lock      as for shared_acquire.lua
-- KEYS[2]  queue     as for shared_acquire.lua
-- KEYS[3]  live      as for shared_acquire.lua
-- KEYS[4]  index     the bucket's shared index, as for shared_acquire.lua
-- KEYS[5]  readers   as for shared_acquire.lua
-- KEYS[6]  holders   as for shared_acquire.lua
-- ARGV[1]  token     the waiter's token
-- ARGV[2]  grace     ms a waiter handed the lock has to claim it
-- ARGV[3]  name      the lock's name
-- Reply:   1
-- Effect:  the token (and its metadata) out of the queue; a place reserved for it and not claimed is given
--          back, and if that leaves nobody, the lock is handed on as shared_release.lua
--          does.
-- #include "include/now.lua"
local lock_key, readers_key, rmeta_key, shared_index = KEYS[1], KEYS[5], KEYS[6], KEYS[4]
local name = ARGV[3]
-- #include "include/shared_keys.lua"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[2] .. '|about', ARGV[1])
if redis.call('GET', lock_key) ~= '=~' or redis.call('HEXISTS', rmeta_key, ARGV[1]) == 1 then
  return 1
end
redis.call('ZREM', readers_key, ARGV[1])
prune_readers()
if not settle_readers() then
  redis.call('DEL', lock_key, readers_key, rmeta_key)
  redis.call('ZREM', shared_index, name)
  if redis.call('EXISTS', KEYS[2]) == 1 then
    local grace = ARGV[2]
    -- #include "include/hand_over.lua"
  end
end
return 1
