-- semaphore_tidy.lua (included): keep a semaphore's keys exactly as long as something in them
-- still counts.
--
-- Needs:   KEYS[1..7] of a semaphore (see semaphore_acquire.lua) and name (its name).
-- Effect:  every key of the semaphore expires when its last lease, patience or reservation
--          ends (all deleted when none is left); the name is in the bucket's index, scored by
--          the last lease end, while anyone holds a permit, and out of it otherwise.
local last = 0
for _, key in ipairs({KEYS[1], KEYS[4], KEYS[5]}) do
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #top > 0 and tonumber(top[2]) > last then
    last = tonumber(top[2])
  end
end
if last == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  redis.call('ZREM', KEYS[7], name)
else
  for i = 1, 5 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('PEXPIREAT', KEYS[i], string.format('%.0f', last + 1))
    end
  end
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #top > 0 then
    redis.call('ZADD', KEYS[7], top[2], name)
  else
    redis.call('ZREM', KEYS[7], name)
  end
end
