-- lapsed.lua (included; one server): a lock found free while waiters are queued for it goes
-- to the first live waiter, not to whoever asks first; one whose exclusive lease ran out
-- beside a downgrade's shared places goes to those.
--
-- Needs:   KEYS[1] the lock, KEYS[3] the queue, KEYS[4] the liveness zset, KEYS[5] the
--          bucket's index (the acquire scripts' keys), ARGV[4] the name, now_ms (string,
--          clock.lua), ARGV[7] (grace, ms; 250 when left out), and two booleans the including
--          script set: queue_exists (the queue or the readers zset, KEYS[3] .. '|readers',
--          exists: the token may be queued already, it waited; false when nobody waits, so
--          the token is in no queue and the script has no queue work to do) and lock_gone
--          (queue_exists, and the lock's key is gone). acquire.lua reads both off one EXISTS of
--          the lock, the queue and the readers zset (and a GET of the lock when any exists);
--          shared_acquire.lua off an EXISTS of the last two, then one of the lock.
-- Effect:  only when the lock's key is gone and its queue (or its readers zset, KEYS[3] ..
--          '|readers') exists: the holder's lease ran out without a release (it crashed, or
--          stopped), since a release hands the lock on itself. Shared places a downgrade took
--          beside that hold keep the lock, as its release would have left it
--          (downgraded.lua, which lists the name in the bucket's shared index). Else the
--          lock is handed to the head of the queue as a release would (hand_over.lua: dead
--          waiters dropped, the first live one, or the run of shared waiters there, reserved
--          the lock for grace ms and woken). The script then goes on as usual: the head
--          claims its reservation, anyone else queues behind it. A non-fair acquirer (token
--          ARGV[1] starts with '!') hands nothing over: it takes the free lock itself.
-- Why:     every waiter blocks until the lease's end on its own timer; without this, the
--          one whose timer fired first took the lock, whatever its place in the queue. On
--          the uncontended path it costs the including script's one EXISTS and no round
--          trip; that EXISTS also tells the script whether the token can be queued
--          (queue_exists), which clients no longer say (acquire.lua's ARGV[6]).
if lock_gone then
  -- The bucket's shared index: shared_acquire.lua's KEYS[5]; acquire.lua's KEYS[5] is the
  -- exclusive one, whose last word "held" reads "shheld" (as in release.lua).
  local shared_index, lock_name = KEYS[5], ARGV[4]
  if string.sub(shared_index, -7) ~= ':shheld' then
    shared_index = string.sub(shared_index, 1, -5) .. 'shheld'
  end
  local KEYS = {KEYS[1], KEYS[3], KEYS[4]}  -- the lock, the queue, the live zset, as below
  local now_ms = tonumber(now_ms)
  local grace = ARGV[7] or '250'
  -- #include "downgraded.lua"
  -- A non-fair acquirer (its token starts with '!') takes the free lock itself, below.
  -- queue_exists: the queue or the readers zset is there; without readers, the queue.
  if not downgraded and string.sub(ARGV[1], 1, 1) ~= '!'
      and (not readers_there or redis.call('EXISTS', KEYS[2]) == 1) then
    -- #include "hand_over.lua"
  end
end
