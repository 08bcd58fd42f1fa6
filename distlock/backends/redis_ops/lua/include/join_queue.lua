-- join_queue.lua (included; Redlock): register token ARGV[1] as a waiter.
--
-- Needs:   KEYS[3] the waiters zset, ARGV[1] the token, now_ms (number) and patience (ms).
-- Effect:  the token scored by the end of its patience in KEYS[3], which lives at least
--          that long.
redis.call('ZADD', KEYS[3], string.format('%.0f', now_ms + patience), ARGV[1])
if redis.call('PTTL', KEYS[3]) < patience then
  redis.call('PEXPIRE', KEYS[3], patience)
end
