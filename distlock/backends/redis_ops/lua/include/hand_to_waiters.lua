-- hand_to_waiters.lua (included; Redlock): hand a lock that is free now to its waiters.
--
-- Needs:   KEYS[1] the lock, KEYS[2] the waiters zset, KEYS[3] the signal list, now_ms
--          (number), grant (string) and grace (ms).
-- Effect:  waiters whose patience ended are dropped; if any still waits, the lock holds
--          "=" .. grant for grace ms and the signal list holds the grant alone (for grace
--          ms): the waiter that pops it presents it to every node.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('SET', KEYS[1], '=' .. grant, 'PX', grace)
  redis.call('DEL', KEYS[3])
  redis.call('RPUSH', KEYS[3], grant)
  redis.call('PEXPIRE', KEYS[3], grace)
end
