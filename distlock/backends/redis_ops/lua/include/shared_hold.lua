-- shared_hold.lua (included): read the shared hold of token ARGV[1], or answer 0 (not held).
--
-- Needs:   lock_key, readers_key, rmeta_key (the script's keys) and now_ms (number).
-- Sets:    held, its fields ("FENCE ACQUIRED_MS RENEWALS DEPTH METADATA").
-- Effect:  the script returns 0 when the lock is reserved for an exclusive waiter, or
--          ARGV[1] holds no place among the readers whose lease still runs. (A place held
--          while the lock is held exclusively is a downgrade's: the exclusive holder's thread
--          took it, see shared_acquire.lua.)
local marker = redis.call('GET', lock_key)
if marker and string.sub(marker, 1, 1) == '=' and marker ~= '=~' then
  return 0
end
local held = redis.call('HGET', rmeta_key, ARGV[1])
local lease_end = tonumber(redis.call('ZSCORE', readers_key, ARGV[1]))
if not held or not lease_end or lease_end <= now_ms then
  return 0
end
