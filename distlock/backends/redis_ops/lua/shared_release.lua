-- shared_release.lua: release a shared hold (or one level of a reentrant one); the last
-- holder out hands the lock to the head of the queue.
--
-- KEYS[1]  lock      as for shared_acquire.lua
-- KEYS[2]  queue     as for shared_acquire.lua
-- KEYS[3]  live      as for shared_acquire.lua
-- KEYS[4]  index     the bucket's shared index, as for shared_acquire.lua
-- KEYS[5]  readers   as for shared_acquire.lua
-- KEYS[6]  holders   as for shared_acquire.lua
-- ARGV[1]  token     the holder's token
-- ARGV[2]  name      the lock's name
-- ARGV[3]  every     '1' to release every reentrant level at once, else '0'
-- ARGV[4]  grace     ms a waiter handed the lock has to claim it
-- Reply:   0 when ARGV[1] holds no shared place (any more), 1 when released, 2 when one
--          reentrant level was released and the token still holds its place.
-- Effect:  the token's place and fields gone, and holders whose lease ended dropped. When no
--          holder (or reserved place) is left, the lock and its shared keys are deleted, the
--          name leaves the shared index and the lock is handed to the head of the queue
--          (hand_over.lua: an exclusive waiter, or the run of shared waiters there). Else the
--          lock's key lives until the last remaining lease ends; if that is sooner than
--          before, an exclusive waiter at the head of the queue is woken (its list gets an
--          element) so that it blocks again only until then, not until the old end. A
--          downgrade's place released while the exclusive hold lasts leaves that hold alone.
-- #include "include/now.lua"
local lock_key, readers_key, rmeta_key, shared_index = KEYS[1], KEYS[5], KEYS[6], KEYS[4]
local name = ARGV[2]
-- #include "include/shared_keys.lua"
-- #include "include/shared_hold.lua"
if ARGV[3] ~= '1' then
  local fence, acquired, renewals, depth, meta = string.match(held, '^(%S+) (%S+) (%S+) (%S+) (.*)$')
  if tonumber(depth) > 1 then
    redis.call('HSET', rmeta_key, ARGV[1],
      fence .. ' ' .. acquired .. ' ' .. renewals .. ' ' .. (tonumber(depth) - 1) .. ' ' .. meta)
    return 2
  end
end
if exclusive_held() then
  -- A downgrade's place, released while its thread still holds the exclusive lock: that
  -- hold keeps everyone else out, as before.
  redis.call('ZREM', readers_key, ARGV[1])
  redis.call('HDEL', rmeta_key, ARGV[1])
  prune_readers()
  settle_readers()
  return 1
end
local old_end = now_ms + redis.call('PTTL', lock_key)
redis.call('ZREM', readers_key, ARGV[1])
redis.call('HDEL', rmeta_key, ARGV[1])
prune_readers()
local last = settle_readers()
if not last then
  redis.call('DEL', lock_key, readers_key, rmeta_key)
  redis.call('ZREM', shared_index, name)
  if redis.call('EXISTS', KEYS[2]) == 1 then
    local grace = ARGV[4]
    -- #include "include/hand_over.lua"
  end
elseif last + 1 < old_end then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #head == 1 and string.sub(head[1], 1, 1) ~= '~' then
    local wake = KEYS[2] .. ':' .. head[1]
    redis.call('RPUSH', wake, 1)
    redis.call('PEXPIRE', wake, ARGV[4])
  end
end
return 1
