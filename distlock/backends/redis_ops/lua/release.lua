-- release.lua: release a lock (or one level of a reentrant hold) and hand it to the longest
-- waiter.
--
-- KEYS[1]  lock      as for acquire.lua
-- KEYS[2]  queue     zset: waiting token -> arrival (us)
-- KEYS[3]  live      zset: waiting token -> when its registration ends (ms)
-- KEYS[4]  index     zset: the names held in the lock's bucket -> lease end (ms)
-- ARGV[1]  token     the holder's token, or '' to release whoever holds the lock (an
--                    operator's force release)
-- ARGV[2]  name      the lock's name
-- ARGV[3]  every     '1' to release every reentrant level at once (the holder's last level:
--                    Lock objects know their own depth, and send it, so that the usual
--                    release only compares the token at the start of the value), else '0'
-- ARGV[4]  grace     optional: ms the waiter handed the lock has to claim it (250 when left
--                    out)
-- Reply:   0 when ARGV[1] does not hold the lock (a lock handed to a waiter, "=TOKEN", is
--          held by nobody yet), 1 when released, 2 when one reentrant level was released and
--          the lock is still held.
-- Effect:  the lock deleted and its name out of the index. If its holder's thread took
--          shared places beside it (a downgrade), the lock goes to them at once, held shared
--          (downgraded.lua; the bucket's shared index is KEYS[4] with its last word "held"
--          read "shheld"). Else, if anyone is queued, the lock is handed to the longest waiter
--          still registered (hand_over.lua); a non-fair hold's release (its token starts
--          with '!') only wakes that waiter instead, and leaves the lock free for whoever
--          asks first (wake_head.lua; a run of shared waiters at the head is still handed
--          the lock).
local value = redis.call('GET', KEYS[1])
if not value or string.sub(value, 1, 1) == '=' then
  return 0
end
if ARGV[1] ~= '' and string.sub(value, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
if ARGV[3] ~= '1' then
  local holder, fence, acquired, renewals, depth, meta =
    string.match(value, '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
  -- #include "include/one_level.lua"
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[2])
if redis.call('EXISTS', KEYS[2], KEYS[2] .. '|readers') > 0 then
  -- #include "include/now.lua"
  local grace = ARGV[4] or '250'
  local shared_index, lock_name = string.sub(KEYS[4], 1, -5) .. 'shheld', ARGV[2]
  -- #include "include/downgraded.lua"
  -- The EXISTS above found the queue or the readers zset: without readers, the queue.
  if not downgraded and (not readers_there or redis.call('EXISTS', KEYS[2]) == 1) then
    local woken = false
    if string.sub(value, 1, 1) == '!' then
      -- #include "include/wake_head.lua"
    end
    if not woken then
      -- #include "include/hand_over.lua"
    end
  end
end
return 1
