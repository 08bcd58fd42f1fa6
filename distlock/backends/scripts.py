"""The Lua scripts behind the Redis backends: every check-and-set is one of these.

Each script touches only the keys of one lock, which share a hash slot (see distlock.names),
so they run unchanged on Redis Cluster. Times come from the server's own clock (TIME), the
same clock that expires the keys. Numbers that do not fit Lua's default "%.14g" formatting
(fencing tokens) are formatted with "%.0f" before being stored or returned.
"""

# Shared prelude: the server's clock in milliseconds and microseconds.
_NOW = """
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
"""

# Shared epilogue: hand a lock that is free now to its waiters, if any still waits: reserve
# it for ``grant`` (for ``grace`` ms) and push the grant to the signal list waiters block on.
# Needs KEYS[1] lock hash, KEYS[2] waiters zset, KEYS[3] signal list, and now_ms.
_HAND_TO_WAITERS = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('HSET', KEYS[1], 'g', grant)
  redis.call('PEXPIRE', KEYS[1], grace)
  redis.call('DEL', KEYS[3])
  redis.call('RPUSH', KEYS[3], grant)
  redis.call('PEXPIRE', KEYS[3], grace)
end
"""

# Shared snippet: register token ARGV[1] in the waiters zset KEYS[3] for `patience` ms from
# now_ms, and keep the zset alive at least that long.
_JOIN_QUEUE = """
redis.call('ZADD', KEYS[3], string.format('%.0f', now_ms + patience), ARGV[1])
if redis.call('PTTL', KEYS[3]) < patience then
  redis.call('PEXPIRE', KEYS[3], patience)
end
"""

# How long a name's last fencing token is remembered after its lease (ms). Tokens are also
# seeded from the server clock in microseconds, so they keep rising after the memory expires
# or the server restarts empty, as long as the server's clock does not step back.
FENCE_MEMORY_MS = 24 * 3600 * 1000

# Acquire a lock, or join its queue of waiters.
#   KEYS[1] lock hash   KEYS[2] fence   KEYS[3] waiters zset   KEYS[4] signal list
#   KEYS[5] index zset of the bucket   KEYS[6] since zset of the bucket
#   ARGV[1] token   ARGV[2] lease (ms)   ARGV[3] holder metadata (JSON)   ARGV[4] name
#   ARGV[5] grant popped from the signal list, or ''   ARGV[6] patience (ms): how long to
#   stay registered as a waiter when the lock is held; 0 to not queue
# Returns {1, fencing token, server time ms} when acquired (also when this token already
# holds it: a retried call whose first reply was lost), {0, remaining lease ms} when held.
# A lock just released to waiters holds a reservation (field g) for the waiter that pops the
# grant: newcomers cannot barge in before it, which keeps waiting fair and bounded.
ACQUIRE = _NOW + """
local state = redis.call('HMGET', KEYS[1], 't', 'g', 'f', 'a')
local holder, reserved = state[1], state[2]
if holder == ARGV[1] then
  return {1, state[3], tonumber(state[4])}
end
if holder or (reserved and reserved ~= ARGV[5]) then
  local patience = tonumber(ARGV[6])
  if patience > 0 then
""" + _JOIN_QUEUE + """  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local ttl = tonumber(ARGV[2])
local fence = now_us
local last = tonumber(redis.call('GET', KEYS[2]))
if last and last >= fence then
  fence = last + 1
end
fence = string.format('%.0f', fence)
redis.call('SET', KEYS[2], fence, 'PX', ttl + """ + str(FENCE_MEMORY_MS) + """)
if reserved then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 't', ARGV[1], 'f', fence, 'm', ARGV[3], 'a', now_ms, 'r', 0, 'd', 1)
redis.call('PEXPIRE', KEYS[1], ttl)
if ARGV[5] ~= '' or tonumber(ARGV[6]) > 0 then
  redis.call('ZREM', KEYS[3], ARGV[1])
end
redis.call('ZADD', KEYS[5], string.format('%.0f', now_ms + ttl), ARGV[4])
redis.call('ZADD', KEYS[6], string.format('%.0f', now_ms), ARGV[4])
-- On one acquire in 16, drop a few index entries whose lease ended without a release
-- (crashed holders), so the index stays about the size of the set of held locks.
if now_us % 16 == 0 then
  local ended = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms, 'LIMIT', 0, 32)
  if #ended > 0 then
    redis.call('ZREM', KEYS[5], unpack(ended))
    redis.call('ZREM', KEYS[6], unpack(ended))
  end
end
return {1, fence, now_ms}
"""

# Release a lock (or one level of a reentrant hold) and hand it to a waiter if any waits.
#   KEYS[1] lock hash   KEYS[2] waiters zset   KEYS[3] signal list   KEYS[4] index zset
#   KEYS[5] since zset
#   ARGV[1] token, or '' to release whoever holds it (operators' force release)
#   ARGV[2] name   ARGV[3] '1' to release every reentrant level at once
#   ARGV[4] how long a waiter has to claim the lock it is handed (ms)
#   ARGV[5] optional: the grant's suffix (default: the server clock). Redlock passes the same
#   random suffix to every node, so the one grant a waiter pops is valid on all of them.
#   ARGV[6] optional: '1' to hand the lock to the waiters also where ARGV[1] does not hold it
#   but nobody else does either (Redlock: the nodes a bare majority left out; without their
#   grant, a newcomer could take them from the waiter the other nodes were handed to).
# Returns 0 when ARGV[1] does not hold the lock, 1 when released, 2 when one reentrant level
# was released and the lock is still held.
RELEASE = """
local state = redis.call('HMGET', KEYS[1], 't', 'd')
local holder = state[1]
if not holder or (ARGV[1] ~= '' and holder ~= ARGV[1]) then
  if holder or ARGV[6] ~= '1' or redis.call('EXISTS', KEYS[2]) == 0 then
    return 0
  end
""" + _NOW + """
  local grant, grace = ARGV[1] .. ':' .. ARGV[5], ARGV[4]
""" + _HAND_TO_WAITERS + """
  return 0
end
if ARGV[3] ~= '1' and tonumber(state[2] or '1') > 1 then
  redis.call('HINCRBY', KEYS[1], 'd', -1)
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('ZREM', KEYS[5], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1
end
""" + _NOW + """
local grant, grace = holder .. ':' .. (ARGV[5] or now_us), ARGV[4]
""" + _HAND_TO_WAITERS + """
return 1
"""

# Extend a held lease (also used for renewals and reentrant acquires).
#   KEYS[1] lock hash   KEYS[2] index zset
#   ARGV[1] token   ARGV[2] new lease (ms)   ARGV[3] name
#   ARGV[4] '1' to count a renewal   ARGV[5] '1' to count one more reentrant level
#   ARGV[6] the most renewals one hold may have (OPTIONS['MAX_RENEWALS']), or '' for no limit
# Returns 1 when extended, 0 when the token does not hold the lock, 2 when a renewal was
# refused because the hold already had ARGV[6] renewals (the lease is left as it was).
EXTEND = """
local state = redis.call('HMGET', KEYS[1], 't', 'r')
if state[1] ~= ARGV[1] then
  return 0
end
if ARGV[4] == '1' and ARGV[6] ~= '' and tonumber(state[2] or '0') >= tonumber(ARGV[6]) then
  return 2
end
""" + _NOW + """
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[3])
if ARGV[4] == '1' then
  redis.call('HINCRBY', KEYS[1], 'r', 1)
end
if ARGV[5] == '1' then
  redis.call('HINCRBY', KEYS[1], 'd', 1)
end
return 1
"""

# Read a held lock.
#   KEYS[1] lock hash
# Returns {} when nobody holds it, else {token, fence, metadata, acquired ms, renewals,
# depth, remaining lease ms, server time ms}.
INSPECT = _NOW + """
local f = redis.call('HMGET', KEYS[1], 't', 'f', 'm', 'a', 'r', 'd')
if not f[1] then
  return {}
end
return {f[1], f[2], f[3], f[4], f[5], f[6], redis.call('PTTL', KEYS[1]), now_ms}
"""

# List the names held in one bucket, dropping entries whose lease has ended.
#   KEYS[1] index zset   KEYS[2] since zset
# Returns {index, since}: flat lists name, lease end (ms), ... and name, acquired (ms), ...
# (Ended names are removed in chunks: Lua's unpack() takes at most a few thousand values.)
HELD_NAMES = _NOW + """
local ended = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
for first = 1, #ended, 1000 do
  local chunk = {unpack(ended, first, math.min(first + 999, #ended))}
  redis.call('ZREM', KEYS[1], unpack(chunk))
  redis.call('ZREM', KEYS[2], unpack(chunk))
end
return {redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'),
        redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')}
"""

# Give up waiting.
#   KEYS[1] waiters zset   ARGV[1] token
LEAVE_QUEUE = """
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

# Take back a lock this token was just granted, without handing it to a waiter (a Redlock
# attempt that did not reach a majority: handing the node on would wake a waiter that cannot
# get a majority either, and so on, in a loop), and queue the token as a waiter instead, as
# the nodes that refused it did.
#   KEYS[1] lock hash   KEYS[2] index zset   KEYS[3] waiters zset   KEYS[4] since zset
#   ARGV[1] token   ARGV[2] name   ARGV[3] patience (ms), as for ACQUIRE; 0 to not queue
# Returns 1 when taken back, 0 when the token did not hold the lock (any more).
UNDO_ACQUIRE = """
local holder = redis.call('HGET', KEYS[1], 't')
if holder and holder ~= ARGV[1] then
  return 0
end
if holder then
  redis.call('DEL', KEYS[1])
end
redis.call('ZREM', KEYS[2], ARGV[2])  -- also when the lease already ran out
redis.call('ZREM', KEYS[4], ARGV[2])
local patience = tonumber(ARGV[3])
if patience > 0 then
""" + _NOW + """
""" + _JOIN_QUEUE + """end
return holder and 1 or 0
"""

# Read several held locks of one bucket in one call (listings read thousands at once).
#   KEYS[1..n] lock hashes, all of one bucket (so of one hash slot)
# Returns {server time ms, one entry per key}: {} when nobody holds that lock, else {token,
# fence, metadata, acquired ms, renewals, depth, remaining lease ms}.
INSPECT_MANY = _NOW + """
local found = {now_ms}
for i, key in ipairs(KEYS) do
  local f = redis.call('HMGET', key, 't', 'f', 'm', 'a', 'r', 'd')
  if f[1] then
    found[i + 1] = {f[1], f[2], f[3], f[4], f[5], f[6], redis.call('PTTL', key)}
  else
    found[i + 1] = {}
  end
end
return found
"""
