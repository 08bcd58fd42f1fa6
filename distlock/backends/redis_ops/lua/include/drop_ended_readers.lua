-- drop_ended_readers.lua (included): the pruning of a lock's shared places, for
-- shared_keys.lua's prune_readers() and for downgraded.lua (which has the keys, not the
-- names shared_keys.lua needs).
--
-- Needs:   now_ms (number).
-- Sets:    drop_ended_readers(readers, rmeta), which drops the holders and reservations
--          whose lease ended from the readers zset ``readers`` and their fields from the
--          holders hash ``rmeta`` (1000 at a time: unpack's limit).
local function drop_ended_readers(readers, rmeta)
  local ended = redis.call('ZRANGEBYSCORE', readers, '-inf', now_ms)
  for first = 1, #ended, 1000 do
    local chunk = {unpack(ended, first, math.min(first + 999, #ended))}
    redis.call('ZREM', readers, unpack(chunk))
    redis.call('HDEL', rmeta, unpack(chunk))
  end
end
