-- one_level.lua (included): release one reentrant level of the hold read by read.lua.
--
-- Needs:   KEYS[1] the lock, ARGV[3] ('1': release every level at once), and holder, fence,
--          acquired, renewals, depth and meta (read.lua).
-- Effect:  when ARGV[3] is not '1' and the hold has more than one level: one level less,
--          the lease kept, and the script returns 2.
if ARGV[3] ~= '1' and tonumber(depth) > 1 then
  depth = tonumber(depth) - 1
  redis.call('SET', KEYS[1],
    holder .. ' ' .. fence .. ' ' .. acquired .. ' ' .. renewals .. ' ' .. depth .. ' ' .. meta,
    'KEEPTTL')
  return 2
end
