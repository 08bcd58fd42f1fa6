-- leave_queue.lua: give up waiting for a lock.
--
-- KEYS[1]  lock      as for acquire.lua
-- KEYS[2]  queue     zset: waiting token -> arrival (us); KEYS[2] .. '|about' the waiters'
--                    metadata (acquire.lua)
-- KEYS[3]  live      zset: waiting token -> when its registration ends (ms)
-- ARGV[1]  token     the waiter's token
-- ARGV[2]  grace     optional: ms the next waiter has to claim the lock, if it is handed on
--                    (250 when left out)
-- Reply:   1
-- Effect:  the token (and its metadata) out of the queue; a lock handed to it in the
--          meantime goes on to the next waiter (hand_over.lua). While shared holders hold the
--          lock (its key holds "=~"), the shared waiters this waiter kept out are woken to
--          join them (wake_readers.lua). While the lock is free (a non-fair release woke this
--          waiter without reserving the lock, or a lease lapsed), the longest waiter still
--          registered is woken as a non-fair release wakes it (wake_head.lua: unless its list
--          holds an element already; a run of shared waiters at the head is handed the lock,
--          hand_over.lua), so that nobody sleeps on a free lock until its BLPOP's timeout.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[2] .. '|about', ARGV[1])
local value = redis.call('GET', KEYS[1])
if value == '=' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- #include "include/now.lua"
  local grace = ARGV[2] or '250'
  -- #include "include/hand_over.lua"
elseif value == '=~' then
  -- #include "include/now.lua"
  local grace = ARGV[2] or '250'
  -- #include "include/wake_readers.lua"
elseif not value then
  -- The leaver may have been woken by a non-fair release (no reservation to pass on): the
  -- wake-up goes on to the next waiter, as the release itself would have sent it.
  -- #include "include/now.lua"
  local grace = ARGV[2] or '250'
  local woken = false
  -- #include "include/wake_head.lua"
  if not woken then
    -- #include "include/hand_over.lua"
  end
end
return 1
