-- grant_release.lua (Redlock): release a lock (or one level of a reentrant hold) on one node
-- and hand it to the waiters, if any waits, with a grant pushed to the list they block on.
--
-- KEYS[1]  lock      as for grant_acquire.lua
-- KEYS[2]  waiters   zset: waiting token -> when its patience ends (ms)
-- KEYS[3]  signal    list a release pushes a grant to
-- KEYS[4]  index     zset: the names held in the lock's bucket -> lease end (ms)
-- ARGV[1]  token     the holder's token, or '' to release whoever holds the lock (an
--                    operator's force release)
-- ARGV[2]  name      the lock's name
-- ARGV[3]  every     '1' to release every reentrant level at once, else '0'
-- ARGV[4]  grace     ms a waiter has to claim the lock it is handed
-- ARGV[5]  suffix    optional: the grant's suffix (default: the server's clock, us). Redlock
--                    passes the same random suffix to every node, so that the one grant a
--                    waiter pops is valid on all of them
-- ARGV[6]  vacant    optional: '1' to hand the lock to the waiters also where ARGV[1] does
--                    not hold it but nobody else does either (the nodes a bare majority
--                    left out: without their grant, a newcomer could take them from the
--                    waiter the other nodes were handed to)
-- Reply:   0 when ARGV[1] does not hold the lock, 1 when released, 2 when one reentrant level
--          was released and the lock is still held.
-- Effect:  the lock deleted and its name out of the index; if any waiter's patience still
--          runs, the lock reserved for the grant TOKEN:SUFFIX and the grant pushed to the
--          signal list (hand_to_waiters.lua).
-- #include "include/read.lua"
if not holder or (ARGV[1] ~= '' and holder ~= ARGV[1]) then
  if holder or ARGV[6] ~= '1' or redis.call('EXISTS', KEYS[2]) == 0 then
    return 0
  end
  -- #include "include/now.lua"
  local grant, grace = ARGV[1] .. ':' .. ARGV[5], ARGV[4]
  -- #include "include/hand_to_waiters.lua"
  return 0
end
-- #include "include/one_level.lua"
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1
end
-- #include "include/now.lua"
local grant, grace = holder .. ':' .. (ARGV[5] or string.format('%.0f', now_us)), ARGV[4]
-- #include "include/hand_to_waiters.lua"
return 1
