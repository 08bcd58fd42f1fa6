-- hand_to_readers.lua (included; one server): hand a lock that is free now to the run of
-- shared waiters at the head of its queue, all at once.
--
-- Needs:   KEYS[1] the lock, KEYS[2] the queue, KEYS[3] the liveness zset, now_ms (number)
--          and grace (ms). The shared holders' zset is KEYS[2] .. '|readers' (the queue's
--          name plus a suffix after '|', which no encoded name has: the same hash slot).
-- Effect:  from the head of the queue, every shared waiter (its token starts with '~') still
--          registered, up to the first exclusive waiter still registered, leaves the queue
--          and is reserved a place among the holders for grace ms (scored so in the readers
--          zset, with no holder fields yet); each one's own list gets one element, which
--          wakes its BLPOP, and its pipelined shared_acquire.lua claims the place in the same
--          round trip (its metadata in KEYS[2] .. '|about' goes: it waits no more). The lock then holds the shared marker "=~" for grace ms (the exclusive
--          scripts see it as reserved for someone else). Waiters whose registration ran out
--          are dropped on the way. Up to 1000 are looked at.
local readers = KEYS[2] .. '|readers'
local reserved = string.format('%.0f', now_ms + grace)
local admitted = 0
redis.call('DEL', readers, KEYS[2] .. '|rmeta')
for _, waiter in ipairs(redis.call('ZRANGE', KEYS[2], 0, 999)) do
  local alive = tonumber(redis.call('ZSCORE', KEYS[3], waiter))
  local live = alive and alive > now_ms
  if live and string.sub(waiter, 1, 1) ~= '~' then
    break
  end
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
  redis.call('HDEL', KEYS[2] .. '|about', waiter)
  if live then
    redis.call('ZADD', readers, reserved, waiter)
    local wake = KEYS[2] .. ':' .. waiter
    redis.call('RPUSH', wake, 1)
    redis.call('PEXPIRE', wake, grace)
    admitted = admitted + 1
  end
end
if admitted > 0 then
  redis.call('SET', KEYS[1], '=~', 'PX', grace)
  redis.call('PEXPIRE', readers, grace + 1)
end
