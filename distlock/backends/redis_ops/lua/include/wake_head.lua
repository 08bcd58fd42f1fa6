-- wake_head.lua (included; one server): wake the longest waiter of a lock that is free now,
-- without handing it the lock (the release of a non-fair hold: its token starts with '!').
--
-- Needs:   KEYS[2] the queue, KEYS[3] the liveness zset, now_ms (number), grace (ms: how
--          long the wake-up element is kept) and woken, a local the caller set to false.
-- Sets:    woken to true when an exclusive waiter was woken; it stays false when the first
--          live waiter is a shared one (the caller hands the lock to the run of shared
--          waiters instead, hand_over.lua) or nobody waits.
-- Effect:  waiters whose registration ran out are dropped on the way (up to 16 looked at);
--          the first live exclusive waiter's own list (KEYS[2] .. ':' .. token) gets one
--          element unless it has one already, which wakes its BLPOP. It stays queued, with
--          its arrival: the lock is not reserved for it, so whoever asks first takes it (a
--          newcomer may overtake it), and if it loses, it waits on in its place.
local queued = redis.call('ZRANGE', KEYS[2], 0, 15)
for _, waiter in ipairs(queued) do
  local alive = tonumber(redis.call('ZSCORE', KEYS[3], waiter))
  if alive and alive > now_ms then
    if string.sub(waiter, 1, 1) ~= '~' then
      -- Not back for the lock since it was woken (a newcomer took it meanwhile, and now
      -- releases it): the element waiting for it wakes it already. A second one would wake
      -- it twice, and a waiter overtaken again and again would spin through its list.
      if redis.call('EXISTS', KEYS[2] .. ':' .. waiter) == 0 then
        -- #include "wake_waiter.lua"
      end
      woken = true
    end
    break
  end
  -- #include "drop_waiter.lua"
end
