-- index.lua (included): list name ARGV[4] in its bucket's index until its lease ends.
--
-- Needs:   KEYS[5] the bucket's index, ARGV[2] the lease (ms), ARGV[4] the name, now_ms and
--          now_us (strings, clock.lua).
-- Effect:  ARGV[4] scored by its lease end in KEYS[5]; on one call in 10, up to 32 entries
--          whose lease ended without a release (crashed holders) dropped, so that the index
--          stays about the size of the set of held locks.
redis.call('ZADD', KEYS[5], now_ms + ARGV[2], ARGV[4])
if string.sub(now_us, -1) == '0' then
  local ended = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms, 'LIMIT', 0, 32)
  if #ended > 0 then
    redis.call('ZREM', KEYS[5], unpack(ended))
  end
end
