-- clock.lua (included): the server's clock as strings of digits.
--
-- Sets:    now_us (16 digits) and now_ms (13 digits), strings cut from TIME's two replies.
-- Why:     joining strings is exact and costs a fraction of tonumber() arithmetic plus
--          string.format('%.0f'), which Lua needs for numbers over 14 digits. Lua turns them
--          into numbers where arithmetic uses them (now_ms + ttl), and redis.call() passes
--          such a number on with 17 significant digits, exactly. (The acquire scripts, the
--          hot path, use it; the others use now.lua.)
local clock = redis.call('TIME')
local micros = string.sub('00000' .. clock[2], -6)
local now_us = clock[1] .. micros
local now_ms = clock[1] .. string.sub(micros, 1, 3)
