-- semaphore_leave.lua: stop waiting for a permit.
--
-- KEYS[1..7] semaphore  the semaphore's seven keys, as semaphore_acquire.lua lists them
-- ARGV[1]  token     the waiter's token
-- ARGV[2]  grace     ms a woken waiter has to claim the permit reserved for it
-- ARGV[3]  name      the semaphore's name
-- Reply:   1
-- Effect:  the token out of the queue, its patience and any reservation and wake-up dropped;
--          the semaphore settled, so that a permit reserved for the token meanwhile passes
--          on to the next waiter (semaphore_settle.lua); the keys' lifetimes and the index
--          kept (semaphore_tidy.lua).
-- #include "include/now.lua"
local name, grace = ARGV[3], tonumber(ARGV[2])
local limit = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0')
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('DEL', KEYS[6] .. ARGV[1])
-- #include "include/semaphore_settle.lua"
-- #include "include/semaphore_tidy.lua"
return 1
