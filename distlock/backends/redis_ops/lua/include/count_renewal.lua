-- count_renewal.lua (included): the renewal limit and the counters of an extend, for a hold
-- read as extend.lua and shared_extend.lua read theirs.
--
-- Needs:   renewals and depth (the hold's counters), ARGV[4] ('1': a renewal), ARGV[5] ('1':
--          one more reentrant level) and ARGV[6] (the most renewals one hold may have, or ''
--          for no limit).
-- Sets:    renewals and depth, counted (numbers) when ARGV[4] or ARGV[5] is '1'.
-- Effect:  the script returns 2, changing nothing, when a renewal is asked for a hold that
--          already had ARGV[6] renewals.
if ARGV[4] == '1' and ARGV[6] ~= '' and tonumber(renewals) >= tonumber(ARGV[6]) then
  return 2
end
if ARGV[4] == '1' then
  renewals = tonumber(renewals) + 1
end
if ARGV[5] == '1' then
  depth = tonumber(depth) + 1
end
