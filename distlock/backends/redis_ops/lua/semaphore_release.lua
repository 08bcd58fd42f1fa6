-- semaphore_release.lua: give a permit back (an operator's force release is the same call
-- with the holder's token) and hand it to the longest waiting token, if any.
--
-- KEYS[1..7] semaphore  the semaphore's seven keys, as semaphore_acquire.lua lists them
-- ARGV[1]  token     the holder's token
-- ARGV[2]  grace     ms a woken waiter has to claim the permit reserved for it
-- ARGV[3]  name      the semaphore's name
-- Reply:   1 when released, 0 when the token held no permit (any more).
-- Effect:  the token's permit and its fields dropped; the semaphore settled, which reserves
--          the freed permit for the longest waiting token and wakes it
--          (semaphore_settle.lua); the keys' lifetimes and the index kept
--          (semaphore_tidy.lua).
-- #include "include/now.lua"
local name, grace = ARGV[3], tonumber(ARGV[2])
local limit = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0')
local released = redis.call('ZREM', KEYS[1], ARGV[1])
local t = ARGV[1]
redis.call('HDEL', KEYS[2], 'm:' .. t, 'a:' .. t, 'f:' .. t, 'r:' .. t)
-- #include "include/semaphore_settle.lua"
-- #include "include/semaphore_tidy.lua"
return released
