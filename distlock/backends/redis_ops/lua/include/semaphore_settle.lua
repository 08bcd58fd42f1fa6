-- semaphore_settle.lua (included): bring a semaphore up to date, and hand its free permits
-- to its waiters.
--
-- Needs:   KEYS[1..6] of a semaphore (see semaphore_acquire.lua), now_ms (number), limit
--          (number) and grace (ms).
-- Sets:    drop(key, members, hash_fields), a function that removes members from a zset in
--          chunks (and their holder fields from the state hash, if hash_fields).
-- Effect:  holders whose lease ended, reservations not claimed in time and waiters whose
--          patience ran out are dropped; then each free permit (the limit less holders and
--          reservations) is reserved, in arrival order, for the longest waiting token, for
--          grace ms, and that token alone is woken through its own list (KEYS[6] .. token).
local function drop(key, members, hash_fields)
  for first = 1, #members, 1000 do
    local chunk = {unpack(members, first, math.min(first + 999, #members))}
    redis.call('ZREM', key, unpack(chunk))
    if hash_fields then
      for _, t in ipairs(chunk) do
        redis.call('HDEL', KEYS[2], 'm:' .. t, 'a:' .. t, 'f:' .. t, 'r:' .. t)
      end
    end
  end
end
drop(KEYS[1], redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms), true)
drop(KEYS[5], redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms), false)
local gave_up = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
drop(KEYS[4], gave_up, false)
drop(KEYS[3], gave_up, false)
local free = limit - redis.call('ZCARD', KEYS[1]) - redis.call('ZCARD', KEYS[5])
while free > 0 do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)
  if #head == 0 then
    break
  end
  local t = head[1]
  redis.call('ZREM', KEYS[3], t)
  redis.call('ZREM', KEYS[4], t)
  redis.call('ZADD', KEYS[5], string.format('%.0f', now_ms + grace), t)
  local signal = KEYS[6] .. t
  redis.call('DEL', signal)
  redis.call('RPUSH', signal, '1')
  redis.call('PEXPIRE', signal, grace)
  free = free - 1
end
