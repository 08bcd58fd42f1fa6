-- wake_waiter.lua (included; one server): wake one waiter blocked on its own list.
--
-- Needs:   KEYS[2] the queue, waiter (its token), grace (ms).
-- Effect:  the waiter's list (KEYS[2] .. ':' .. waiter) gets one element, kept for grace ms,
--          which ends its BLPOP (or the next one, within the grace).
local wake = KEYS[2] .. ':' .. waiter
redis.call('RPUSH', wake, 1)
redis.call('PEXPIRE', wake, grace)
