-- grant_leave_queue.lua (Redlock): give up waiting on one node.
--
-- KEYS[1]  waiters   zset: waiting token -> when its patience ends (ms)
-- ARGV[1]  token     the waiter's token
-- Reply:   1 when the token was waiting, else 0.
-- Effect:  the token out of the waiters.
return redis.call('ZREM', KEYS[1], ARGV[1])
