-- next_fence.lua (included): the fencing token of an acquire that succeeds.
--
-- Needs:   KEYS[2] the bucket's fence (the last token issued in the lock's bucket), now_us
--          (string, clock.lua).
-- Sets:    next_fence, a string of digits.
-- Effect:  KEYS[2] holds next_fence (kept for good: one small key per bucket).
-- Why:     fencing tokens come from the server's clock in microseconds, and are at least one
--          more than the last token issued in the bucket (SET ... GET swaps it in one
--          command). So they keep rising while the server's clock steps back, and after a
--          restart that lost the memory, as long as the clock has moved past the last token
--          by then. Digit strings of one length compare as their numbers do. acquire.lua draws
--          one only once it knows it takes the lock (a token drawn and never used would
--          only leave a gap).
local next_fence = now_us
local last = redis.call('SET', KEYS[2], next_fence, 'GET')
if last and (#last > #next_fence or (#last == #next_fence and last >= next_fence)) then
  next_fence = string.format('%.0f', tonumber(last) + 1)
  redis.call('SET', KEYS[2], next_fence)
end
