-- grant_acquire.lua (Redlock): take a lock on one node, or join its waiters.
--
-- KEYS[1]  lock      as for acquire.lua; "=GRANT" while it is handed to whichever waiter
--                    pops GRANT from the signal list
-- KEYS[2]  fence     string: the last fencing token issued in the lock's bucket (no TTL)
-- KEYS[3]  waiters   zset: waiting token -> when its patience ends (ms)
-- KEYS[4]  signal    list a release pushes a grant to; every waiter blocks on it (BLPOP)
-- KEYS[5]  index     zset: the names held in the lock's bucket -> lease end (ms)
-- ARGV[1]  token     the acquirer's token
-- ARGV[2]  lease     ms
-- ARGV[3]  metadata  the holder's JSON
-- ARGV[4]  name      the lock's name
-- ARGV[5]  grant     the grant popped from the signal list, or ''
-- ARGV[6]  patience  ms to stay registered as a waiter when the lock is held; 0: do not queue
-- Reply:   "FENCE ACQUIRED_MS" when acquired, as acquire.lua answers (also when this token
--          already holds the lock: a retried call whose first reply was lost); {0, remaining
--          lease ms} when held.
-- Effect:  a free lock, or one reserved for ARGV[5], held by the token for the lease (a new
--          fencing token drawn, the name in the index) and the token out of the waiters; a
--          held lock, or one reserved for another grant, registers the token as a waiter for
--          its patience. A lock just released to waiters is reserved for the waiter that pops
--          the grant: newcomers cannot barge in before it, which keeps waiting fair and
--          bounded.
-- #include "include/clock.lua"
-- #include "include/read.lua"
if holder == ARGV[1] then
  return fence .. ' ' .. acquired
end
if holder or (reserved and reserved ~= ARGV[5]) then
  local patience = tonumber(ARGV[6])
  if patience > 0 then
    -- #include "include/join_queue.lua"
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
-- #include "include/new_hold.lua"
-- #include "include/take.lua"
if ARGV[5] ~= '' or tonumber(ARGV[6]) > 0 then
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return next_fence .. ' ' .. now_ms
