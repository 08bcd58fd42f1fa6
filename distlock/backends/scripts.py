"""The Lua scripts behind the Redis backends: every check-and-set is one of these.

Each script touches only the keys of one lock, which share a hash slot (see distlock.names),
so they run unchanged on Redis Cluster. Times come from the server's own clock (TIME), the
same clock that expires the keys. Numbers that do not fit Lua's default "%.14g" formatting
(fencing tokens, times) are formatted with "%.0f" before being stored or returned.

A held lock is one string key whose TTL is the lease and whose value is
``TOKEN FENCE ACQUIRED_MS RENEWALS DEPTH METADATA`` (METADATA is the holder's JSON, last, so
it may hold spaces). A lock handed to a waiter that has not claimed it yet holds ``=`` and
that waiter's token (or, on a Redlock node, the grant). One string, rather than a hash, keeps
a held lock small whatever the metadata's length: Redis stores a hash with a field over 64
bytes as a hash table, several times larger.
"""

# Shared prelude of the acquire scripts (the hot path): the server's clock as strings of
# digits, ``now_ms`` (13 digits) and ``now_us`` (16), cut from TIME's two strings. Joining
# strings is exact and costs a fraction of tonumber() arithmetic plus string.format('%.0f'),
# which Lua needs for numbers over 14 digits. Lua turns them into numbers where arithmetic
# uses them (``now_ms + ttl``), and redis.call() passes such a number on with 17 significant
# digits, exactly.
_CLOCK = """
local clock = redis.call('TIME')
local micros = string.sub('00000' .. clock[2], -6)
local now_us = clock[1] .. micros
local now_ms = clock[1] .. string.sub(micros, 1, 3)
"""

# Shared prelude of the other scripts: the same clock as numbers (exact: below 2^53), for
# scripts that compare times.
_NOW = _CLOCK + """
now_us, now_ms = tonumber(now_us), tonumber(now_ms)
"""

# Shared prelude: read the lock KEYS[1]. Sets ``holder`` (nil when nobody holds it), its
# ``fence``, ``acquired``, ``renewals``, ``depth`` and ``meta``, and ``reserved`` (the token or
# grant the lock was handed to, nil when it was not).
_READ = """
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
"""

# Shared expression: the value of the lock read by _READ, with ``renewals`` and ``depth`` as
# they are now.
_HELD_VALUE = (
    "holder .. ' ' .. fence .. ' ' .. acquired .. ' ' .. renewals .. ' ' .. depth .. ' ' .. meta"
)

# Shared snippet: the fencing token of an acquire that succeeds, as ``next_fence``. Needs
# KEYS[2] the bucket's fence and the string now_us (_CLOCK).
#
# Fencing tokens come from the server's clock in microseconds, and are at least one more than
# the last token issued in the lock's bucket, which KEYS[2] remembers for good (one small key
# per bucket; SET ... GET swaps it in one command). So they keep rising while the server's
# clock steps back, and after a restart that lost the memory, as long as the clock has moved
# past the last token by then. (Digit strings of one length compare as their numbers do. A
# token drawn by an attempt that then finds the lock held is simply never used.)
_NEXT_FENCE = """
local next_fence = now_us
local last = redis.call('SET', KEYS[2], next_fence, 'GET')
if last and (#last > #next_fence or (#last == #next_fence and last >= next_fence)) then
  next_fence = string.format('%.0f', tonumber(last) + 1)
  redis.call('SET', KEYS[2], next_fence)
end
"""

# Shared snippet: the next fencing token (_NEXT_FENCE) and ``held_value``, the value of the
# lock once token ARGV[1] holds it, with metadata ARGV[3] (see the module's docstring).
# Needs now_ms.
_NEW_HOLD = _NEXT_FENCE + """
local held_value = ARGV[1] .. ' ' .. next_fence .. ' ' .. now_ms .. ' 0 1 ' .. ARGV[3]
"""

# Shared snippet: put name ARGV[4] in the bucket's index KEYS[5] until its lease (ARGV[2] ms)
# ends. Needs the strings now_ms and now_us.
_INDEX = """
redis.call('ZADD', KEYS[5], now_ms + ARGV[2], ARGV[4])
-- On one acquire in 10, drop a few index entries whose lease ended without a release
-- (crashed holders), so the index stays about the size of the set of held locks.
if string.sub(now_us, -1) == '0' then
  local ended = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms, 'LIMIT', 0, 32)
  if #ended > 0 then
    redis.call('ZREM', KEYS[5], unpack(ended))
  end
end
"""

# Shared snippet: store ``held_value`` (_NEW_HOLD) in the lock KEYS[1] whatever it held, with
# a lease of ARGV[2] ms, and put name ARGV[4] in the index.
_TAKE = """
redis.call('PSETEX', KEYS[1], ARGV[2], held_value)
""" + _INDEX

# Shared snippet (releases): drop one reentrant level of the hold read by _READ, keeping its
# lease, and return 2. Needs ARGV[3] ('1': release every level at once).
_ONE_LEVEL = """
if ARGV[3] ~= '1' and tonumber(depth) > 1 then
  depth = tonumber(depth) - 1
  redis.call('SET', KEYS[1], """ + _HELD_VALUE + """, 'KEEPTTL')
  return 2
end
"""

# ----------------------------------------------------------------------------------------
# One server (RedisBackend, DjangoRedisBackend): a release hands the lock to one waiter.

# Shared snippet: hand a lock that is free now to the longest waiter still waiting: reserve it
# for that waiter's token for ``grace`` ms and wake it (its own list). Waiters whose
# registration ran out (they gave up, or died) are dropped on the way. The woken waiter claims
# the lock with ACQUIRE in the same round trip that woke it (see ScriptedBackend).
# Needs KEYS[1] lock, KEYS[2] queue zset, KEYS[3] liveness zset, now_ms, grace.
_HAND_OVER = """
local queued = redis.call('ZRANGE', KEYS[2], 0, 15)
for _, waiter in ipairs(queued) do
  local alive = tonumber(redis.call('ZSCORE', KEYS[3], waiter))
  if alive and alive > now_ms then
    redis.call('SET', KEYS[1], '=' .. waiter, 'PX', grace)
    local wake = KEYS[2] .. ':' .. waiter
    redis.call('RPUSH', wake, 1)
    redis.call('PEXPIRE', wake, grace)
    break
  end
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end
"""

# Acquire a lock, claim it when it was handed to this token, or join its queue of waiters.
#   KEYS[1] lock   KEYS[2] the bucket's fence   KEYS[3] queue zset (tokens by arrival, in us)
#   KEYS[4] liveness zset (tokens by when their registration ends, ms)
#   KEYS[5] index zset of the bucket (names by lease end)
#   ARGV[1] token   ARGV[2] lease (ms)   ARGV[3] holder metadata (JSON)   ARGV[4] name
#   ARGV[5] patience (ms): how long to stay registered as a waiter when the lock is held;
#   0 to not queue   ARGV[6] '1' when this token may be queued already (it waited)
# Returns the string "FENCE ACQUIRED_MS" when acquired (also when this token already holds
# it: a retried call whose first reply was lost; one string costs the server less than a
# table), {0, remaining lease ms, place in the queue (0 first, -1 not queued), server time
# ms} when held. A lock handed to a waiter is reserved for it for the grace: newcomers cannot
# barge in before it claims it.
ACQUIRE = _CLOCK + _NEW_HOLD + """
if redis.call('SET', KEYS[1], held_value, 'NX', 'PX', ARGV[2]) then
""" + _INDEX + """
  if ARGV[6] == '1' then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
  end
  return next_fence .. ' ' .. now_ms
end
""" + _READ + """
if holder == ARGV[1] then
  return fence .. ' ' .. acquired
end
if holder or (reserved and reserved ~= ARGV[1]) then
  local patience = tonumber(ARGV[5])
  local place = -1
  if patience > 0 then
    redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[1])
    redis.call('ZADD', KEYS[4], now_ms + patience, ARGV[1])
    for _, key in ipairs({KEYS[3], KEYS[4]}) do
      if redis.call('PTTL', key) < patience then
        redis.call('PEXPIRE', key, patience)
      end
    end
    place = redis.call('ZRANK', KEYS[3], ARGV[1])
  end
  return {0, redis.call('PTTL', KEYS[1]), place, now_ms}
end
-- Handed to this token by a release: claim it.
""" + _TAKE + """
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return next_fence .. ' ' .. now_ms
"""

# Release a lock (or one level of a reentrant hold) and hand it to the longest waiter.
#   KEYS[1] lock   KEYS[2] queue zset   KEYS[3] liveness zset   KEYS[4] index zset
#   ARGV[1] token, or '' to release whoever holds it (operators' force release)
#   ARGV[2] name   ARGV[3] '1' to release every reentrant level at once (the holder's last
#   level: Lock objects know their own depth, and send it so that the usual release only
#   compares the token at the start of the value)
#   ARGV[4] how long the waiter handed the lock has to claim it (ms)
# Returns 0 when ARGV[1] does not hold the lock, 1 when released, 2 when one reentrant level
# was released and the lock is still held. A reservation (``=TOKEN``) is held by nobody yet.
RELEASE = """
local value = redis.call('GET', KEYS[1])
if not value or string.sub(value, 1, 1) == '=' then
  return 0
end
if ARGV[1] ~= '' and string.sub(value, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
if ARGV[3] ~= '1' then
  local holder, fence, acquired, renewals, depth, meta =
    string.match(value, '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
""" + _ONE_LEVEL + """end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then
""" + _NOW + """
  local grace = ARGV[4]
""" + _HAND_OVER + """end
return 1
"""

# Give up waiting. A lock handed to this waiter in the meantime goes on to the next one.
#   KEYS[1] lock   KEYS[2] queue zset   KEYS[3] liveness zset
#   ARGV[1] token   ARGV[2] how long the next waiter has to claim the lock (ms)
LEAVE_QUEUE = """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[1]) == '=' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
""" + _NOW + """
  local grace = ARGV[2]
""" + _HAND_OVER + """end
return 1
"""

# ----------------------------------------------------------------------------------------
# Both.

# Extend a held lease (also used for renewals and reentrant acquires).
#   KEYS[1] lock   KEYS[2] index zset
#   ARGV[1] token   ARGV[2] new lease (ms)   ARGV[3] name
#   ARGV[4] '1' to count a renewal   ARGV[5] '1' to count one more reentrant level
#   ARGV[6] the most renewals one hold may have (OPTIONS['MAX_RENEWALS']), or '' for no limit
# Returns 1 when extended, 0 when the token does not hold the lock, 2 when a renewal was
# refused because the hold already had ARGV[6] renewals (the lease is left as it was).
EXTEND = _READ + """
if holder ~= ARGV[1] then
  return 0
end
if ARGV[4] == '1' and ARGV[6] ~= '' and tonumber(renewals) >= tonumber(ARGV[6]) then
  return 2
end
""" + _NOW + """
if ARGV[4] == '1' or ARGV[5] == '1' then
  if ARGV[4] == '1' then
    renewals = tonumber(renewals) + 1
  end
  if ARGV[5] == '1' then
    depth = tonumber(depth) + 1
  end
  redis.call('SET', KEYS[1], """ + _HELD_VALUE + """, 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('ZADD', KEYS[2], string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[3])
return 1
"""

# Read a held lock.
#   KEYS[1] lock
# Returns {} when nobody holds it, else {value, remaining lease ms, server time ms}.
INSPECT = _NOW + """
local value = redis.call('GET', KEYS[1])
if not value or string.sub(value, 1, 1) == '=' then
  return {}
end
return {value, redis.call('PTTL', KEYS[1]), now_ms}
"""

# List the names held in one bucket, dropping entries whose lease has ended.
#   KEYS[1] index zset (its name ends in ':held'; the bucket's locks share what precedes it)
# Returns a flat list: name, lease end (ms), acquired (ms), ...
# (Ended names are removed in chunks: Lua's unpack() takes at most a few thousand values.)
HELD_NAMES = _NOW + """
local ended = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
for first = 1, #ended, 1000 do
  redis.call('ZREM', KEYS[1], unpack(ended, first, math.min(first + 999, #ended)))
end
local base = string.sub(KEYS[1], 1, -6) .. ':lock:'
local found = {}
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  -- The lock's key: the name percent-encoded as distlock.names.encode_name does.
  local encoded = string.gsub(entries[i], '[^%w%-%._~:/@%+=,]', function(c)
    return string.format('%%%02X', string.byte(c))
  end)
  local value = redis.call('GET', base .. encoded)
  local since = value and string.match(value, '^[^=]%S* %S+ (%S+) ')
  if since then
    found[#found + 1] = entries[i]
    found[#found + 1] = entries[i + 1]
    found[#found + 1] = since
  end
end
return found
"""

# ----------------------------------------------------------------------------------------
# Redlock (RedlockBackend): a release pushes one grant to a list every waiter blocks on; the
# waiter that pops it presents it to every node.

# Shared snippet: register token ARGV[1] in the waiters zset KEYS[3] for `patience` ms from
# now_ms, and keep the zset alive at least that long.
_JOIN_QUEUE = """
redis.call('ZADD', KEYS[3], string.format('%.0f', now_ms + patience), ARGV[1])
if redis.call('PTTL', KEYS[3]) < patience then
  redis.call('PEXPIRE', KEYS[3], patience)
end
"""

# Shared epilogue: hand a lock that is free now to its waiters, if any still waits: reserve
# it for ``grant`` (for ``grace`` ms) and push the grant to the signal list waiters block on.
# Needs KEYS[1] lock, KEYS[2] waiters zset, KEYS[3] signal list, and now_ms.
_HAND_TO_WAITERS = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('SET', KEYS[1], '=' .. grant, 'PX', grace)
  redis.call('DEL', KEYS[3])
  redis.call('RPUSH', KEYS[3], grant)
  redis.call('PEXPIRE', KEYS[3], grace)
end
"""

# Acquire a lock on one node, or join its queue of waiters.
#   KEYS[1] lock   KEYS[2] fence   KEYS[3] waiters zset   KEYS[4] signal list
#   KEYS[5] index zset of the bucket
#   ARGV[1] token   ARGV[2] lease (ms)   ARGV[3] holder metadata (JSON)   ARGV[4] name
#   ARGV[5] grant popped from the signal list, or ''   ARGV[6] patience (ms): how long to
#   stay registered as a waiter when the lock is held; 0 to not queue
# Returns "FENCE ACQUIRED_MS" when acquired, as ACQUIRE does (also when this token already
# holds it: a retried call whose first reply was lost), {0, remaining lease ms} when held.
# A lock just released to waiters is reserved for the waiter that pops the grant: newcomers
# cannot barge in before it, which keeps waiting fair and bounded.
GRANT_ACQUIRE = _CLOCK + _READ + """
if holder == ARGV[1] then
  return fence .. ' ' .. acquired
end
if holder or (reserved and reserved ~= ARGV[5]) then
  local patience = tonumber(ARGV[6])
  if patience > 0 then
""" + _JOIN_QUEUE + """  end
  return {0, redis.call('PTTL', KEYS[1])}
end
""" + _NEW_HOLD + _TAKE + """
if ARGV[5] ~= '' or tonumber(ARGV[6]) > 0 then
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return next_fence .. ' ' .. now_ms
"""

# Release a lock (or one level of a reentrant hold) on one node and hand it to the waiters if
# any waits: a grant, pushed to the signal list they all block on.
#   KEYS[1] lock   KEYS[2] waiters zset   KEYS[3] signal list   KEYS[4] index zset
#   ARGV[1] token, or '' to release whoever holds it (operators' force release)
#   ARGV[2] name   ARGV[3] '1' to release every reentrant level at once
#   ARGV[4] how long a waiter has to claim the lock it is handed (ms)
#   ARGV[5] optional: the grant's suffix (default: the server clock). Redlock passes the same
#   random suffix to every node, so the one grant a waiter pops is valid on all of them.
#   ARGV[6] optional: '1' to hand the lock to the waiters also where ARGV[1] does not hold it
#   but nobody else does either (the nodes a bare majority left out; without their grant, a
#   newcomer could take them from the waiter the other nodes were handed to).
# Returns 0 when ARGV[1] does not hold the lock, 1 when released, 2 when one reentrant level
# was released and the lock is still held.
GRANT_RELEASE = _READ + """
if not holder or (ARGV[1] ~= '' and holder ~= ARGV[1]) then
  if holder or ARGV[6] ~= '1' or redis.call('EXISTS', KEYS[2]) == 0 then
    return 0
  end
""" + _NOW + """
  local grant, grace = ARGV[1] .. ':' .. ARGV[5], ARGV[4]
""" + _HAND_TO_WAITERS + """
  return 0
end
""" + _ONE_LEVEL + """
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1
end
""" + _NOW + """
local grant, grace = holder .. ':' .. (ARGV[5] or string.format('%.0f', now_us)), ARGV[4]
""" + _HAND_TO_WAITERS + """
return 1
"""

# Give up waiting on one node.
#   KEYS[1] waiters zset   ARGV[1] token
GRANT_LEAVE_QUEUE = """
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

# Take back a lock this token was just granted, without handing it to a waiter (an attempt
# that did not reach a majority: handing the node on would wake a waiter that cannot get a
# majority either, and so on, in a loop), and queue the token as a waiter instead, as the
# nodes that refused it did.
#   KEYS[1] lock   KEYS[2] index zset   KEYS[3] waiters zset
#   ARGV[1] token   ARGV[2] name   ARGV[3] patience (ms), as for GRANT_ACQUIRE; 0 to not queue
# Returns 1 when taken back, 0 when the token did not hold the lock (any more).
UNDO_ACQUIRE = _READ + """
if holder and holder ~= ARGV[1] then
  return 0
end
if holder then
  redis.call('DEL', KEYS[1])
end
redis.call('ZREM', KEYS[2], ARGV[2])  -- also when the lease already ran out
local patience = tonumber(ARGV[3])
if patience > 0 then
""" + _NOW + """
""" + _JOIN_QUEUE + """end
return holder and 1 or 0
"""

# Read several held locks of one bucket in one call (listings read thousands at once).
#   KEYS[1..n] locks, all of one bucket (so of one hash slot)
# Returns {server time ms, one entry per key}: {} when nobody holds that lock, else {value,
# remaining lease ms} (the value as INSPECT returns it).
INSPECT_MANY = _NOW + """
local found = {now_ms}
for i, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value and string.sub(value, 1, 1) ~= '=' then
    found[i + 1] = {value, redis.call('PTTL', key)}
  else
    found[i + 1] = {}
  end
end
return found
"""
