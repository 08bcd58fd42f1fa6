-- drop_waiter.lua (included; one server): take one waiter out of a lock's queue.
--
-- Needs:   KEYS[2] the queue, KEYS[3] the liveness zset, waiter (its token).
-- Effect:  the token out of both zsets, and its metadata out of KEYS[2] .. '|about'.
redis.call('ZREM', KEYS[2], waiter)
redis.call('ZREM', KEYS[3], waiter)
redis.call('HDEL', KEYS[2] .. '|about', waiter)
