-- take.lua (included): make held_value (new_hold.lua) the lock, whatever it held.
--
-- Needs:   KEYS[1] the lock, KEYS[5] the bucket's index, ARGV[2] the lease (ms), ARGV[4] the
--          name, held_value, now_ms and now_us.
-- Effect:  KEYS[1] holds held_value for the lease; the name is in the index (index.lua).
redis.call('PSETEX', KEYS[1], ARGV[2], held_value)
-- #include "index.lua"
