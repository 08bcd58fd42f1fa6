-- semaphore_acquire.lua: take a permit of a semaphore, or join its queue of waiters.
--
-- KEYS[1]  holders   zset: holder token -> lease end (server clock, ms)
-- KEYS[2]  state     hash: 'limit', 'fence' (the last permit number), and per holder token T:
--                    'm:T' metadata JSON, 'a:T' acquired (ms), 'f:T' permit number, 'r:T'
--                    renewals
-- KEYS[3]  queue     zset: waiting token -> arrival (us): first come, first served
-- KEYS[4]  patience  zset: waiting token -> when it stops waiting (ms)
-- KEYS[5]  reserved  zset: token -> until when a freed permit is kept for it (ms)
-- KEYS[6]  signal    the prefix of each waiter's wake-up list: waiter T blocks (BLPOP) on
--                    KEYS[6] .. T, which shares the others' hash tag (so their slot)
-- KEYS[7]  index     zset: the semaphore names of the bucket -> last lease end (ms)
-- ARGV[1]  token     the acquirer's token
-- ARGV[2]  lease     ms
-- ARGV[3]  metadata  the holder's JSON
-- ARGV[4]  name      the semaphore's name
-- ARGV[5]  limit     how many may hold a permit at once (>= 1)
-- ARGV[6]  patience  ms to stay queued when no permit is free; 0: do not queue
-- ARGV[7]  grace     ms a woken waiter has to claim the permit reserved for it
-- Reply:   {1, permit number, server time ms} when the token holds a permit (also when it
--          already held one: a retried call whose first reply was lost); {0, ms until a
--          permit may come back on its own} when not.
-- Effect:  the limit stored (the latest acquire's applies: when it shrinks, holders keep
--          their permits and none is handed out until fewer hold than the new limit; when it
--          grows, waiters are admitted now); the semaphore settled (semaphore_settle.lua); a
--          permit taken when one is reserved for the token, or when holders and reservations
--          are below the limit (reservations are made first, so nobody waits then), with a
--          permit number above every earlier one; otherwise the token queued for its
--          patience (keeping its place if queued already); the keys' lifetimes and the index
--          kept (semaphore_tidy.lua).
-- #include "include/now.lua"
local name, grace, limit = ARGV[4], tonumber(ARGV[7]), tonumber(ARGV[5])
redis.call('HSET', KEYS[2], 'limit', ARGV[5])
-- #include "include/semaphore_settle.lua"
-- How long until a permit may come back on its own (the first lease or reservation to
-- end), in ms; at least 1.
local function next_free()
  local soonest = nil
  for _, key in ipairs({KEYS[1], KEYS[5]}) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #first > 0 and (not soonest or tonumber(first[2]) < soonest) then
      soonest = tonumber(first[2])
    end
  end
  if not soonest then
    return 1
  end
  return math.max(soonest - now_ms, 1)
end
local t = ARGV[1]
if redis.call('ZSCORE', KEYS[1], t) then
  local held = redis.call('HMGET', KEYS[2], 'f:' .. t, 'a:' .. t)
  return {1, held[1], tonumber(held[2])}
end
local reserved = redis.call('ZREM', KEYS[5], t) == 1
if reserved then
  redis.call('DEL', KEYS[6] .. t)  -- the wake-up, when this call came first
end
if not reserved and redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[5]) >= limit then
  local patience = tonumber(ARGV[6])
  if patience > 0 then
    redis.call('ZADD', KEYS[3], 'NX', string.format('%.0f', now_us), t)
    redis.call('ZADD', KEYS[4], string.format('%.0f', now_ms + patience), t)
  end
  local wait = next_free()
  -- #include "include/semaphore_tidy.lua"
  return {0, wait}
end
local fence = now_us
local last = tonumber(redis.call('HGET', KEYS[2], 'fence'))
if last and last >= fence then
  fence = last + 1
end
fence = string.format('%.0f', fence)
redis.call('ZREM', KEYS[3], t)
redis.call('ZREM', KEYS[4], t)
redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + tonumber(ARGV[2])), t)
redis.call('HSET', KEYS[2], 'fence', fence, 'm:' .. t, ARGV[3], 'a:' .. t, now_ms,
           'f:' .. t, fence, 'r:' .. t, 0)
-- #include "include/semaphore_tidy.lua"
return {1, fence, now_ms}
