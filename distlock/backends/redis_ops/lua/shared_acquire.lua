-- shared_acquire.lua: take a shared hold of a lock, claim the place a release reserved for
-- this token, or queue.
--
-- KEYS[1]  lock      as for acquire.lua; "=~" (the shared marker) while shared holders hold
--                    it, its TTL the last of their leases: the exclusive scripts see it as
--                    reserved for someone else, so an exclusive acquirer queues
-- KEYS[2]  fence     as for acquire.lua (every grant, of either kind, draws the next token)
-- KEYS[3]  queue     as for acquire.lua, shared by both kinds: a shared waiter's token starts
--                    with '~'; KEYS[3] .. '|about' the waiters' metadata, as for acquire.lua
-- KEYS[4]  live      as for acquire.lua
-- KEYS[5]  index     zset: the shared-held names of the lock's bucket -> last lease end (ms)
-- KEYS[6]  readers   zset: shared holder token -> lease end (ms); a token a release reserved
--                    a place for (no holder fields yet) -> end of its grace. Its name is
--                    KEYS[3] .. '|readers'
-- KEYS[7]  holders   hash: shared holder token -> "FENCE ACQUIRED_MS RENEWALS DEPTH METADATA"
--                    (as acquire.lua's value, without the token). Its name is KEYS[3] ..
--                    '|rmeta'
-- ARGV[1]  token     the acquirer's token ('~' and 32 hexadecimal digits)
-- ARGV[2]  lease     ms
-- ARGV[3]  metadata  the holder's JSON
-- ARGV[4]  name      the lock's name
-- ARGV[5]  patience  ms to stay registered as a waiter when it must wait; 0: do not queue
-- ARGV[6]  waited    '1' when this token may be queued already (it waited), else '0'
-- ARGV[7]  grace     ms a waiter handed the lock has to claim it (250 when left out)
-- ARGV[8]  downgrade the token of the acquirer's thread's own exclusive hold of the lock, or
--                    '' (or left out): while that token holds the lock, the shared place is
--                    granted at once (a downgrade; see release.lua for what its release does)
-- Reply:   as acquire.lua's: "FENCE ACQUIRED_MS" when held (also when this token already
--          holds it: a retried call), else {0, remaining ms of the lock's key, place in the
--          queue (0 first, -1 not queued), server time ms}.
-- Effect:  the token holds a shared place for the lease (a new fencing token drawn) when the
--          lock is free, when a release reserved a place for it, or when shared holders hold
--          it and no exclusive waiter still registered is queued ahead of it, anywhere in the
--          queue (a queued writer keeps later readers out). Otherwise it queues as acquire.lua does (its metadata
--          kept while it waits). Holders whose
--          lease ended are dropped first (shared_keys.lua). While ARGV[8] holds the lock
--          exclusively, the place is granted at once beside that hold (a downgrade). A free lock with waiters queued
--          goes to the head of the queue first, as for acquire.lua (lapsed.lua).
-- #include "include/clock.lua"
local queue_exists = redis.call('EXISTS', KEYS[3], KEYS[3] .. '|readers') > 0
local lock_gone = queue_exists and redis.call('EXISTS', KEYS[1]) == 0
-- #include "include/lapsed.lua"
local lock_key, readers_key, rmeta_key, shared_index = KEYS[1], KEYS[6], KEYS[7], KEYS[5]
local name = ARGV[4]
local token = ARGV[1]
-- #include "include/shared_keys.lua"
local value = redis.call('GET', lock_key)
local may_join = false
if not value then
  redis.call('DEL', readers_key, rmeta_key)
  may_join = true
elseif ARGV[8] and ARGV[8] ~= '' and string.sub(value, 1, #ARGV[8] + 1) == ARGV[8] .. ' ' then
  -- A downgrade: the place is granted beside the exclusive hold, which keeps every other
  -- acquirer out until its release turns the lock over to the readers (release.lua).
  prune_readers()
  local held = redis.call('HGET', rmeta_key, token)
  if held and redis.call('ZSCORE', readers_key, token) then
    local fence, acquired = string.match(held, '^(%S+) (%S+) ')
    return fence .. ' ' .. acquired
  end
  may_join = true
elseif value == '=~' then
  prune_readers()
  if redis.call('ZSCORE', readers_key, token) then
    local held = redis.call('HGET', rmeta_key, token)
    if held then
      local fence, acquired = string.match(held, '^(%S+) (%S+) ')
      return fence .. ' ' .. acquired
    end
    may_join = true
  else
    -- Join unless a registered exclusive waiter is queued ahead of this token: the whole
    -- queue is looked at, 256 at a time (a newcomer is behind everyone in it).
    may_join = true
    local first, done = 0, redis.call('EXISTS', KEYS[3]) == 0
    while not done do
      local chunk = redis.call('ZRANGE', KEYS[3], first, first + 255)
      done = #chunk < 256
      for _, waiter in ipairs(chunk) do
        if waiter == token then
          done = true
          break
        end
        if string.sub(waiter, 1, 1) ~= '~' then
          local alive = tonumber(redis.call('ZSCORE', KEYS[4], waiter))
          if alive and alive > tonumber(now_ms) then
            may_join, done = false, true
            break
          end
        end
      end
      first = first + 256
    end
  end
end
if may_join then
  -- #include "include/next_fence.lua"
  redis.call('ZADD', readers_key, now_ms + ARGV[2], token)
  redis.call('HSET', rmeta_key, token, next_fence .. ' ' .. now_ms .. ' 0 1 ' .. ARGV[3])
  settle_readers()
  if ARGV[6] == '1' then
    redis.call('ZREM', KEYS[3], token)
    redis.call('ZREM', KEYS[4], token)
    redis.call('HDEL', KEYS[3] .. '|about', token)
  end
  return next_fence .. ' ' .. now_ms
end
local patience = tonumber(ARGV[5])
local place = -1
if patience > 0 then
  local about = KEYS[3] .. '|about'
  if redis.call('ZADD', KEYS[3], 'NX', now_us, token) == 1 then
    redis.call('HSET', about, token, ARGV[3])
  end
  redis.call('ZADD', KEYS[4], now_ms + patience, token)
  for _, key in ipairs({KEYS[3], KEYS[4], about}) do
    if redis.call('PTTL', key) < patience then
      redis.call('PEXPIRE', key, patience)
    end
  end
  place = redis.call('ZRANK', KEYS[3], token)
end
return {0, redis.call('PTTL', lock_key), place, now_ms}
