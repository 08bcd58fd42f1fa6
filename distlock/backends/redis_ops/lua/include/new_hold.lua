-- new_hold.lua (included): the value of the lock once token ARGV[1] holds it.
--
-- Needs:   KEYS[2] the bucket's fence, ARGV[1] the token, ARGV[3] the holder's metadata,
--          now_us and now_ms (strings, clock.lua).
-- Sets:    next_fence (next_fence.lua) and held_value, the lock's value:
--          "TOKEN FENCE ACQUIRED_MS RENEWALS DEPTH METADATA", with no renewals and depth 1.
-- #include "next_fence.lua"
local held_value = ARGV[1] .. ' ' .. next_fence .. ' ' .. now_ms .. ' 0 1 ' .. ARGV[3]
