-- downgraded.lua (included; one server): when an exclusive hold ends, leave the lock to the
-- shared places its holder's thread took beside it (a downgrade, see shared_acquire.lua).
--
-- Needs:   KEYS[1] the lock (gone now), KEYS[2] the queue, KEYS[3] the liveness zset, now_ms
--          (number) and grace (ms). The readers zset and holders hash are KEYS[2] ..
--          '|readers' and KEYS[2] .. '|rmeta' (as for shared_acquire.lua); shared_index, the
--          bucket's shared index, and lock_name, the lock's name.
-- Sets:    downgraded: true when live shared places were left; readers_there: whether the
--          readers zset exists (a caller that found the queue or the readers zset there
--          knows, when it does not, that the queue does).
-- Effect:  places whose lease ended are dropped; if any is left, the lock holds the shared
--          marker "=~" until the last of their leases ends (in the same step that ended the
--          exclusive hold: no writer can come in between), the name is scored by that end in
--          the shared index, and the shared waiters at the head of the queue, up to the first
--          exclusive waiter, are woken to join them (wake_readers.lua). A queued writer stays
--          queued behind them.
local downgraded = false
local readers_of = KEYS[2] .. '|readers'
local readers_there = redis.call('EXISTS', readers_of) == 1
if readers_there then
  local rmeta_of = KEYS[2] .. '|rmeta'
  -- As shared_keys.lua's prune_readers() (not included here: it needs the names a shared
  -- script sets, where this fragment has KEYS[2]'s).
  -- #include "drop_ended_readers.lua"
  drop_ended_readers(readers_of, rmeta_of)
  local top = redis.call('ZRANGE', readers_of, -1, -1, 'WITHSCORES')
  if #top > 0 then
    local until_ms = string.format('%.0f', tonumber(top[2]) + 1)
    redis.call('SET', KEYS[1], '=~', 'PXAT', until_ms)
    redis.call('PEXPIREAT', readers_of, until_ms)
    redis.call('PEXPIREAT', rmeta_of, until_ms)
    redis.call('ZADD', shared_index, top[2], lock_name)
    -- #include "wake_readers.lua"
    downgraded = true
  end
end
