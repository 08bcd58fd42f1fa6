-- semaphore_held_names.lua: list the semaphore names of one bucket that someone holds.
--
-- KEYS[1]  index     zset: the semaphore names of the bucket -> last lease end (ms)
-- Reply:   the names.
-- Effect:  entries whose last lease has ended are dropped.
-- #include "include/now.lua"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
return redis.call('ZRANGE', KEYS[1], 0, -1)
