"""The Lua scripts behind semaphores on Redis: every operation on a semaphore is one of these.

A semaphore named N lives in seven keys that share N's bucket hash tag (see
distlock.names.bucket_of), so every script touches one slot and runs unchanged on a Cluster.
Every script takes the same KEYS, built by ``semaphore_keys``:

    KEYS[1] holders zset   token -> lease end (ms, server clock)
    KEYS[2] state hash     'limit', 'fence' (last permit number), and per holder token T:
                           'm:T' metadata JSON, 'a:T' acquired (ms), 'f:T' permit number,
                           'r:T' renewals
    KEYS[3] queue zset     waiting token -> arrival (us): first come, first served
    KEYS[4] patience zset  waiting token -> when it stops waiting (ms)
    KEYS[5] reserved zset  token -> until when a freed permit is kept for it (ms)
    KEYS[6] signal prefix  a waiter T blocks (BLPOP) on the list KEYS[6] .. T; it is in the
                           same slot as the others (same hash tag)
    KEYS[7] index zset     semaphore names of the bucket -> last lease end (ms), for listing

Fairness: a permit freed while tokens wait is reserved, in arrival order, for the longest
waiting token (for ``grace`` ms) and that token alone is woken through its own list. A
newcomer takes a permit only when holders plus reservations are below the limit, which (as
reservations are made first) means that nobody waits. A reservation not claimed in time
(a waiter that died) lapses and the permit passes on at the next operation.

The limit is the one passed by the latest acquire attempt (stored in 'limit'): when it
shrinks, holders keep their permits and none is handed out until fewer hold than the new
limit; when it grows, waiters are admitted at that acquire.
"""
from .scripts import _NOW

# Shared prelude (after _NOW, with `limit` set): forget holders whose lease ended, lapsed
# reservations and waiters whose patience ran out, then reserve the free permits for the
# waiters in arrival order and wake each through its own list.
#   needs ARGV[GRACE] as `grace` (ms)
_SETTLE = """
local function drop(key, members, hash_fields)
  for first = 1, #members, 1000 do
    local chunk = {unpack(members, first, math.min(first + 999, #members))}
    redis.call('ZREM', key, unpack(chunk))
    if hash_fields then
      for _, t in ipairs(chunk) do
        redis.call('HDEL', KEYS[2], 'm:' .. t, 'a:' .. t, 'f:' .. t, 'r:' .. t)
      end
    end
  end
end
drop(KEYS[1], redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms), true)
drop(KEYS[5], redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms), false)
local gave_up = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
drop(KEYS[4], gave_up, false)
drop(KEYS[3], gave_up, false)
local free = limit - redis.call('ZCARD', KEYS[1]) - redis.call('ZCARD', KEYS[5])
while free > 0 do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)
  if #head == 0 then
    break
  end
  local t = head[1]
  redis.call('ZREM', KEYS[3], t)
  redis.call('ZREM', KEYS[4], t)
  redis.call('ZADD', KEYS[5], string.format('%.0f', now_ms + grace), t)
  local signal = KEYS[6] .. t
  redis.call('DEL', signal)
  redis.call('RPUSH', signal, '1')
  redis.call('PEXPIRE', signal, grace)
  free = free - 1
end
"""

# Shared epilogue: keep every key exactly as long as something in it still counts, and the
# name in the bucket's index while anyone holds a permit.
#   needs ARGV[NAME] as `name`
_TIDY = """
local last = 0
for _, key in ipairs({KEYS[1], KEYS[4], KEYS[5]}) do
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #top > 0 and tonumber(top[2]) > last then
    last = tonumber(top[2])
  end
end
if last == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  redis.call('ZREM', KEYS[7], name)
else
  for i = 1, 5 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('PEXPIREAT', KEYS[i], string.format('%.0f', last + 1))
    end
  end
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #top > 0 then
    redis.call('ZADD', KEYS[7], top[2], name)
  else
    redis.call('ZREM', KEYS[7], name)
  end
end
"""

# Shared: how long until a permit may come back on its own (the first lease or reservation
# to end), in ms; at least 1.
_NEXT_FREE = """
local function next_free()
  local soonest = nil
  for _, key in ipairs({KEYS[1], KEYS[5]}) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #first > 0 and (not soonest or tonumber(first[2]) < soonest) then
      soonest = tonumber(first[2])
    end
  end
  if not soonest then
    return 1
  end
  return math.max(soonest - now_ms, 1)
end
"""

# Take a permit, or join the queue of waiters.
#   ARGV[1] token   ARGV[2] lease (ms)   ARGV[3] holder metadata (JSON)   ARGV[4] name
#   ARGV[5] limit (>= 1)   ARGV[6] patience (ms): how long to stay queued when no permit is
#   free; 0 to not queue   ARGV[7] grace (ms) a woken waiter has to claim its permit
# Returns {1, permit number, server time ms} when a permit is held (also when this token
# already held one: a retried call whose first reply was lost), {0, ms until a permit may
# come back on its own} when not.
ACQUIRE = _NOW + """
local name, grace, limit = ARGV[4], tonumber(ARGV[7]), tonumber(ARGV[5])
redis.call('HSET', KEYS[2], 'limit', ARGV[5])
""" + _SETTLE + _NEXT_FREE + """
local t = ARGV[1]
if redis.call('ZSCORE', KEYS[1], t) then
  local held = redis.call('HMGET', KEYS[2], 'f:' .. t, 'a:' .. t)
  return {1, held[1], tonumber(held[2])}
end
local reserved = redis.call('ZREM', KEYS[5], t) == 1
if reserved then
  redis.call('DEL', KEYS[6] .. t)  -- the wake-up, when this call came first
end
if not reserved and redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[5]) >= limit then
  local patience = tonumber(ARGV[6])
  if patience > 0 then
    redis.call('ZADD', KEYS[3], 'NX', string.format('%.0f', now_us), t)
    redis.call('ZADD', KEYS[4], string.format('%.0f', now_ms + patience), t)
  end
  local wait = next_free()
""" + _TIDY + """
  return {0, wait}
end
local fence = now_us
local last = tonumber(redis.call('HGET', KEYS[2], 'fence'))
if last and last >= fence then
  fence = last + 1
end
fence = string.format('%.0f', fence)
redis.call('ZREM', KEYS[3], t)
redis.call('ZREM', KEYS[4], t)
redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + tonumber(ARGV[2])), t)
redis.call('HSET', KEYS[2], 'fence', fence, 'm:' .. t, ARGV[3], 'a:' .. t, now_ms,
           'f:' .. t, fence, 'r:' .. t, 0)
""" + _TIDY + """
return {1, fence, now_ms}
"""

# Give a permit back (an operator's force release is the same call with the holder's token)
# and hand it to the longest waiting token, if any.
#   ARGV[1] token   ARGV[2] grace (ms)   ARGV[3] name
# Returns 1 when released, 0 when the token held no permit (any more).
RELEASE = _NOW + """
local name, grace = ARGV[3], tonumber(ARGV[2])
local limit = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0')
local released = redis.call('ZREM', KEYS[1], ARGV[1])
local t = ARGV[1]
redis.call('HDEL', KEYS[2], 'm:' .. t, 'a:' .. t, 'f:' .. t, 'r:' .. t)
""" + _SETTLE + _TIDY + """
return released
"""

# Extend a held permit's lease (also for renewals).
#   ARGV[1] token   ARGV[2] new lease (ms)   ARGV[3] '1' to count a renewal
#   ARGV[4] the most renewals one hold may have (MAX_RENEWALS), or '' for no limit
#   ARGV[5] grace (ms)   ARGV[6] name
# Returns 1 when extended, 0 when the token holds no permit, 2 when the renewal was refused
# at MAX_RENEWALS (the lease is left as it was).
EXTEND = _NOW + """
local name, grace = ARGV[6], tonumber(ARGV[5])
local limit = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0')
""" + _SETTLE + """
local t = ARGV[1]
local outcome = 0
if redis.call('ZSCORE', KEYS[1], t) then
  local renewals = tonumber(redis.call('HGET', KEYS[2], 'r:' .. t) or '0')
  if ARGV[3] == '1' and ARGV[4] ~= '' and renewals >= tonumber(ARGV[4]) then
    outcome = 2
  else
    redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now_ms + tonumber(ARGV[2])), t)
    if ARGV[3] == '1' then
      redis.call('HINCRBY', KEYS[2], 'r:' .. t, 1)
    end
    outcome = 1
  end
end
""" + _TIDY + """
return outcome
"""

# Stop waiting; a permit reserved for the token meanwhile passes on to the next waiter.
#   ARGV[1] token   ARGV[2] grace (ms)   ARGV[3] name
LEAVE = _NOW + """
local name, grace = ARGV[3], tonumber(ARGV[2])
local limit = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0')
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('DEL', KEYS[6] .. ARGV[1])
""" + _SETTLE + _TIDY + """
return 1
"""

# Read a semaphore (changes nothing).
# Returns {limit, server time ms, waiting, reserved, token, lease end, metadata, acquired,
# permit number, renewals, token, ...} for the holders whose lease runs, first to end first;
# {} when nobody holds or waits for a permit.
INSPECT = _NOW + """
local holders = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
local waiting = redis.call('ZCOUNT', KEYS[4], '(' .. now_ms, '+inf')
if #holders == 0 and waiting == 0 then
  return {}
end
local reply = {redis.call('HGET', KEYS[2], 'limit') or '0', now_ms, waiting,
               redis.call('ZCOUNT', KEYS[5], '(' .. now_ms, '+inf')}
for i = 1, #holders, 2 do
  local t = holders[i]
  local f = redis.call('HMGET', KEYS[2], 'm:' .. t, 'a:' .. t, 'f:' .. t, 'r:' .. t)
  for _, value in ipairs({t, holders[i + 1], f[1] or '', f[2] or '0', f[3] or '0',
                          f[4] or '0'}) do
    reply[#reply + 1] = value
  end
end
return reply
"""

# List the semaphore names of one bucket that someone holds, dropping ended entries.
#   KEYS[1] index zset
# Returns the names.
HELD_NAMES = _NOW + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

SCRIPT_SOURCES = {
    "semaphore_acquire": ACQUIRE,
    "semaphore_release": RELEASE,
    "semaphore_extend": EXTEND,
    "semaphore_leave": LEAVE,
    "semaphore_inspect": INSPECT,
    "semaphore_held_names": HELD_NAMES,
}
