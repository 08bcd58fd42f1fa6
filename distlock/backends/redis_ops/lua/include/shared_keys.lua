-- shared_keys.lua (included): the names the shared-lock parts use for a script's keys.
--
-- Needs:   lock_key, readers_key, rmeta_key and shared_index (the keys, set by the script),
--          name (the lock's name) and now_ms (number).
-- Sets:    prune_readers(), which drops holders and reservations whose lease ended (and
--          their fields), and settle_readers(), which returns false when no holder or
--          reservation is left, else sets the lock to the shared marker "=~" until the last
--          lease ends (the readers zset and holder fields expire with it) and scores the
--          name by that end in the shared index (on one call in 10, up to 32 names whose
--          last lease ended without a release dropped from it, as index.lua does), and returns
--          that end (ms). While the lock is held exclusively (a downgrade: the exclusive
--          holder's thread holds a shared place too), settle_readers() leaves the lock alone and
--          only keeps the readers' keys until the last lease ends. exclusive_held() returns
--          whether the lock's key holds an exclusive hold.
-- Why:     a crashed reader's lease ends on the server's clock, without a release: every
--          shared script prunes first, so only live holders count.
-- #include "drop_ended_readers.lua"
local function prune_readers()
  drop_ended_readers(readers_key, rmeta_key)
end
local function exclusive_held()
  local value = redis.call('GET', lock_key)
  return value ~= false and string.sub(value, 1, 1) ~= '='
end
local function settle_readers()
  local top = redis.call('ZRANGE', readers_key, -1, -1, 'WITHSCORES')
  if #top == 0 then
    return false
  end
  local last = tonumber(top[2])
  local until_ms = string.format('%.0f', last + 1)
  if exclusive_held() then
    redis.call('PEXPIREAT', readers_key, until_ms)
    redis.call('PEXPIREAT', rmeta_key, until_ms)
    return last
  end
  redis.call('SET', lock_key, '=~', 'PXAT', until_ms)
  redis.call('PEXPIREAT', readers_key, until_ms)
  redis.call('PEXPIREAT', rmeta_key, until_ms)
  redis.call('ZADD', shared_index, top[2], name)
  if now_ms % 10 == 0 then  -- as index.lua: names whose last lease ended without a release
    local ended = redis.call('ZRANGEBYSCORE', shared_index, '-inf', now_ms, 'LIMIT', 0, 32)
    if #ended > 0 then
      redis.call('ZREM', shared_index, unpack(ended))
    end
  end
  return last
end
