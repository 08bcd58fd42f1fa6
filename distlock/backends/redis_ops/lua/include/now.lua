-- now.lua (included): the server's clock as numbers, for scripts that compare times.
--
-- Sets:    now_us and now_ms, numbers (exact: below 2^53).
-- #include "clock.lua"
now_us, now_ms = tonumber(now_us), tonumber(now_ms)
