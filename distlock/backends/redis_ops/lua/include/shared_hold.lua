-- shared_hold.lua (included): read the shared hold of token ARGV[1], or answer 0 (not held).
--
-- Needs:   lock_key, readers_key, rmeta_key (the script's keys) and now_ms (number).
-- Sets:    held, its fields ("FENCE ACQUIRED_MS RENEWALS DEPTH METADATA").
-- Effect:  the script returns 0 when the lock is not held shared, or ARGV[1] holds no place
--          among the readers whose lease still runs.
if redis.call('GET', lock_key) ~= '=~' then
  return 0
end
local held = redis.call('HGET', rmeta_key, ARGV[1])
local lease_end = tonumber(redis.call('ZSCORE', readers_key, ARGV[1]))
if not held or not lease_end or lease_end <= now_ms then
  return 0
end
