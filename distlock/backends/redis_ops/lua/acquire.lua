-- acquire.lua: take a lock, claim it when a release handed it to this token, or queue.
--
-- KEYS[1]  lock      string "TOKEN FENCE ACQUIRED_MS RENEWALS DEPTH METADATA" (METADATA, the
--                    holder's JSON, last: it may hold spaces), its TTL the lease; "=TOKEN"
--                    while it is handed to waiter TOKEN, who has not claimed it yet
-- KEYS[2]  fence     string: the last fencing token issued in the lock's bucket (no TTL)
-- KEYS[3]  queue     zset: waiting token -> arrival (server clock, us); waiter T's wake-up
--                    list is KEYS[3] .. ':' .. T, and the hash KEYS[3] .. '|about' holds
--                    each waiting token -> its metadata JSON (who waits: `distlock info`;
--                    '|' never appears in an encoded name, so no lock's key is that)
-- KEYS[4]  live      zset: waiting token -> when its registration ends (server clock, ms)
-- KEYS[5]  index     zset: the names held in the lock's bucket -> lease end (ms)
-- ARGV[1]  token     the acquirer's token ('!' first: a non-fair acquirer, which takes a free
--                    lock whoever waits)
-- ARGV[2]  lease     ms
-- ARGV[3]  metadata  the holder's JSON (kept as the waiter's while it is queued)
-- ARGV[4]  name      the lock's name
-- ARGV[5]  patience  ms to stay registered as a waiter when the lock is held; 0: do not queue
-- ARGV[6]  waited    optional, ignored: the '1' or '0' older clients send (whether this
--                    token may be queued); the script tells it itself (lapsed.lua)
-- ARGV[7]  grace     optional: ms a waiter handed the lock has to claim it (250 when left out)
-- Reply:   "FENCE ACQUIRED_MS" (a string: one costs the server less than a table) when
--          acquired, also when this token already holds the lock (a retried call whose first
--          reply was lost); {0, remaining lease ms, place in the queue (0 first, -1 not
--          queued), server time ms} when held.
-- Effect:  a free lock, or one handed to this token, held by it for the lease with a new
--          fencing token (next_fence.lua: drawn only then) and listed in the index; this
--          token out of the queue once it holds the lock (no queue work when no queue or
--          readers zset exists: nobody waits; one ZREM when it is not queued: a fair waiter
--          handed the lock left the queue at the handoff). A held lock, or one handed to
--          another waiter (it is reserved for that waiter for the grace: newcomers cannot
--          barge in), queues the token for its patience (first registration keeps its
--          arrival; no token drawn, no try to take it) and keeps the queue zsets alive at
--          least that long (one PTTL, of the queue, stands for the three keys, which are
--          extended together); a token queued for the first time has its metadata in KEYS[3] .. '|about'
--          (written on the waiting path only), dropped when it leaves the queue. A free lock
--          with waiters queued (its holder's lease ran out without a release) goes to the
--          first live waiter first (lapsed.lua): a newcomer or a later waiter queues behind
--          it. A non-fair acquirer (its token starts with '!') takes a free lock whoever is
--          queued (it may overtake them), never one reserved for a waiter.
-- #include "include/clock.lua"
-- One EXISTS tells the uncontended path (nothing there: no lock, no queue, no readers) from
-- the rest, where the lock's value is read (held, handed to a waiter, or free with a queue):
-- a held lock is then queued for without drawing a fencing token or trying to take it.
local found = redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[3] .. '|readers')
local value = found > 0 and redis.call('GET', KEYS[1])
local queue_exists = found > (value and 1 or 0)
local lock_gone = queue_exists and not value
-- #include "include/lapsed.lua"
if lock_gone then
  value = redis.call('GET', KEYS[1])  -- lapsed.lua may have handed it over
end
local holder, fence, acquired, reserved
if value then
  if string.sub(value, 1, 1) == '=' then
    reserved = string.sub(value, 2)
  else
    holder, fence, acquired = string.match(value, '^(%S+) (%S+) (%S+) ')
  end
end
if holder == ARGV[1] then
  return fence .. ' ' .. acquired
end
if value and reserved ~= ARGV[1] then
  local patience = tonumber(ARGV[5])
  local place = -1
  if patience > 0 then
    local about = KEYS[3] .. '|about'
    if redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[1]) == 1 then
      redis.call('HSET', about, ARGV[1], ARGV[3])
    end
    redis.call('ZADD', KEYS[4], now_ms + patience, ARGV[1])
    -- The three keys are made, extended and emptied together (every script that registers
    -- a waiter extends all three to its patience), so the queue's TTL stands for theirs; a
    -- queue that did not exist was made by this call, and this token is its first.
    if not queue_exists or redis.call('PTTL', KEYS[3]) < patience then
      -- ARGV[5], the string: a Lua number goes out formatted anew for each call.
      redis.call('PEXPIRE', KEYS[3], ARGV[5])
      redis.call('PEXPIRE', KEYS[4], ARGV[5])
      redis.call('PEXPIRE', about, ARGV[5])
    end
    place = queue_exists and redis.call('ZRANK', KEYS[3], ARGV[1]) or 0
  end
  return {0, redis.call('PTTL', KEYS[1]), place, now_ms}
end
-- Free (this script saw it so: nothing can come in between), or handed to this token by a
-- release: take it. A token still in the queue (a fair waiter leaves it when the lock is
-- handed to it, a non-fair one stays; a late call of its own may have queued it again)
-- leaves it; its ZREM tells whether it was there.
-- #include "include/new_hold.lua"
-- #include "include/take.lua"
if queue_exists and redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[3] .. '|about', ARGV[1])
end
return next_fence .. ' ' .. now_ms
