-- lapsed.lua (included; one server): a lock found free while waiters are queued for it goes
-- to the first live waiter, not to whoever asks first.
--
-- Needs:   KEYS[1] the lock, KEYS[3] the queue, KEYS[4] the liveness zset (the acquire
--          scripts' keys), now_ms (string, clock.lua) and ARGV[7] (grace, ms; 250 when an
--          older client leaves it out).
-- Effect:  only when the lock's key is gone and its queue exists: the holder's lease ran out
--          without a release (it crashed, or stopped), since a release hands the lock on
--          itself. The lock is handed to the head of the queue as a release would
--          (hand_over.lua: dead waiters dropped, the first live one, or the run of shared
--          waiters there, reserved the lock for grace ms and woken). The script then goes on
--          as usual: the head claims its reservation, anyone else queues behind it.
-- Why:     every waiter blocks until the lease's end on its own timer; without this, the
--          one whose timer fired first took the lock, whatever its place in the queue. On
--          the uncontended path it costs one EXISTS (no queue) and no round trip.
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  local KEYS = {KEYS[1], KEYS[3], KEYS[4]}  -- hand_over.lua's: the lock, the queue, the live
  local now_ms = tonumber(now_ms)
  local grace = ARGV[7] or '250'
  -- #include "hand_over.lua"
end
