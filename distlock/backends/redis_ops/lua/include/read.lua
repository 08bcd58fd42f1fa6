-- read.lua (included): read the lock KEYS[1].
--
-- Needs:   KEYS[1] the lock.
-- Sets:    holder (the holder's token; nil when nobody holds the lock), fence, acquired,
--          renewals, depth and meta (strings), and reserved (the token or grant the lock was
--          handed to and not claimed yet; nil when it was not).
local value = redis.call('GET', KEYS[1])
local holder, fence, acquired, renewals, depth, meta, reserved
if value then
  if string.sub(value, 1, 1) == '=' then
    reserved = string.sub(value, 2)
  else
    holder, fence, acquired, renewals, depth, meta =
      string.match(value, '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
  end
end
