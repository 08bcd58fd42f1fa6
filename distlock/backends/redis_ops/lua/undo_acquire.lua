-- undo_acquire.lua (Redlock): take back a lock this token was just granted on one node,
-- without handing it to a waiter, and queue the token as a waiter instead, as the nodes that
-- refused it did. For an attempt that did not reach a majority: handing the node on would
-- wake a waiter that cannot get a majority either, and so on, in a loop.
--
-- KEYS[1]  lock      as for grant_acquire.lua
-- KEYS[2]  index     zset: the names held in the lock's bucket -> lease end (ms)
-- KEYS[3]  waiters   zset: waiting token -> when its patience ends (ms)
-- ARGV[1]  token     the token the lock was granted to
-- ARGV[2]  name      the lock's name
-- ARGV[3]  patience  ms to stay registered as a waiter, as for grant_acquire.lua; 0: do not
--                    queue
-- Reply:   1 when taken back, 0 when the token did not hold the lock (any more).
-- Effect:  the lock deleted if the token held it; the name out of the index (also when the
--          lease already ran out); the token registered as a waiter for its patience.
-- #include "include/read.lua"
if holder and holder ~= ARGV[1] then
  return 0
end
if holder then
  redis.call('DEL', KEYS[1])
end
redis.call('ZREM', KEYS[2], ARGV[2])
local patience = tonumber(ARGV[3])
if patience > 0 then
  -- #include "include/now.lua"
  -- #include "include/join_queue.lua"
end
return holder and 1 or 0
