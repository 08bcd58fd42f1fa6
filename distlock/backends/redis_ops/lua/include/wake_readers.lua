-- wake_readers.lua (included; one server): wake the shared waiters at the head of a queue
-- that shared holders hold, once no exclusive waiter stands before them.
--
-- Needs:   KEYS[2] the queue, KEYS[3] the liveness zset, now_ms (number) and grace (ms).
-- Effect:  from the head of the queue, each shared waiter still registered, up to the first
--          exclusive waiter still registered, gets one element in its own list: its BLPOP
--          returns and its pipelined shared_acquire.lua joins the holders. Waiters whose
--          registration ran out are dropped on the way. Up to 1000 are looked at.
for _, waiter in ipairs(redis.call('ZRANGE', KEYS[2], 0, 999)) do
  local alive = tonumber(redis.call('ZSCORE', KEYS[3], waiter))
  if alive and alive > now_ms then
    if string.sub(waiter, 1, 1) ~= '~' then
      break
    end
    local wake = KEYS[2] .. ':' .. waiter
    redis.call('RPUSH', wake, 1)
    redis.call('PEXPIRE', wake, grace)
  else
    redis.call('ZREM', KEYS[2], waiter)
    redis.call('HDEL', KEYS[2] .. '|about', waiter)
    redis.call('ZREM', KEYS[3], waiter)
  end
end
