-- hand_over.lua (included; one server): hand a lock that is free now to its longest waiter.
--
-- Needs:   KEYS[1] the lock, KEYS[2] the queue, KEYS[3] the liveness zset, now_ms (number)
--          and grace (ms: how long the waiter has to claim the lock).
-- Effect:  the lock holds "=" .. the first waiter still registered, for grace ms, so that
--          nobody else can take it first, and that waiter leaves the queue; its own list
--          (KEYS[2] .. ':' .. token) gets one element, which wakes its BLPOP, and the waiter
--          claims the lock with acquire.lua in the same round trip. When that waiter is a shared one (its token
--          starts with '~'), the lock goes to the whole run of shared waiters at the head of
--          the queue instead (hand_to_readers.lua). Waiters whose registration ran out (they
--          gave up, or died) are dropped on the way, with their metadata (KEYS[2] .. '|about';
--          up to 16 are looked at). A waiter handed the lock that was the only one queued
--          deletes the queue's three keys (KEYS[2], KEYS[3], KEYS[2] .. '|about').
local queued = redis.call('ZRANGE', KEYS[2], 0, 15)
for _, waiter in ipairs(queued) do
  local alive = tonumber(redis.call('ZSCORE', KEYS[3], waiter))
  if alive and alive > now_ms and string.sub(waiter, 1, 1) == '~' then
    -- #include "hand_to_readers.lua"
    break
  elseif alive and alive > now_ms then
    -- The waiter leaves the queue now: it holds a reservation, not a place. Were it to die
    -- unclaimed, an entry left behind would keep the readers queued behind it out for its
    -- whole registration, not just the grace. The last one in it takes the queue's three
    -- keys with it in one DEL (they hold the same tokens: every script adds and drops a
    -- token in all three).
    if #queued == 1 then
      redis.call('DEL', KEYS[2], KEYS[3], KEYS[2] .. '|about')
    else
      -- #include "drop_waiter.lua"
    end
    redis.call('SET', KEYS[1], '=' .. waiter, 'PX', grace)
    -- #include "wake_waiter.lua"
    break
  end
  -- #include "drop_waiter.lua"
end
