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
-- Effect:  a new fencing token drawn (next_fence.lua); a free lock, or one handed to this
--          token, held by it for the lease and listed in the index; this token out of the
--          queue once it holds the lock (no queue work when no queue or readers zset exists:
--          nobody waits, and a single waiter handed the lock left the queue at the handoff).
--          A held lock, or one handed to another waiter (it is reserved for that waiter for
--          the grace: newcomers cannot barge in), queues the token for its patience (first
--          registration keeps its arrival) and keeps the queue zsets alive at least that
--          long; a token queued for the first time has its metadata in KEYS[3] .. '|about'
--          (written on the waiting path only), dropped when it leaves the queue. A free lock
--          with waiters queued (its holder's lease ran out without a release) goes to the
--          first live waiter first (lapsed.lua): a newcomer or a later waiter queues behind
--          it. A non-fair acquirer (its token starts with '!') takes a free lock whoever is
--          queued (it may overtake them), never one reserved for a waiter.
-- #include "include/clock.lua"
-- #include "include/lapsed.lua"
-- #include "include/new_hold.lua"
if redis.call('SET', KEYS[1], held_value, 'NX', 'PX', ARGV[2]) then
  -- #include "include/index.lua"
  if queue_exists then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
    redis.call('HDEL', KEYS[3] .. '|about', ARGV[1])
  end
  return next_fence .. ' ' .. now_ms
end
-- #include "include/read.lua"
if holder == ARGV[1] then
  return fence .. ' ' .. acquired
end
if holder or (reserved and reserved ~= ARGV[1]) then
  local patience = tonumber(ARGV[5])
  local place = -1
  if patience > 0 then
    local about = KEYS[3] .. '|about'
    if redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[1]) == 1 then
      redis.call('HSET', about, ARGV[1], ARGV[3])
    end
    redis.call('ZADD', KEYS[4], now_ms + patience, ARGV[1])
    for _, key in ipairs({KEYS[3], KEYS[4], about}) do
      if redis.call('PTTL', key) < patience then
        redis.call('PEXPIRE', key, patience)
      end
    end
    place = redis.call('ZRANK', KEYS[3], ARGV[1])
  end
  return {0, redis.call('PTTL', KEYS[1]), place, now_ms}
end
-- Handed to this token by a release: claim it. The handoff took it out of the queue
-- (hand_over.lua); a queue that still exists may hold it again (a late call of its own).
-- #include "include/take.lua"
if queue_exists then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[3] .. '|about', ARGV[1])
end
return next_fence .. ' ' .. now_ms
