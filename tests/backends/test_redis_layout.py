"""What the Redis backend stores, and how: keys, index, notifications, script atomicity."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import distlock
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture
def data(redis_backend: str) -> redis.Redis:
    return redis.Redis.from_url(redis_backend, decode_responses=True)


def test_every_key_starts_with_the_prefix_and_shares_one_hash_tag(data) -> None:
    with distlock.lock("orders:{42}* x", ttl=5):
        keys = data.keys("*")
    assert keys and all(key.startswith("test:{b") for key in keys)
    assert len({key.split("}")[0] for key in keys}) == 1


def test_listing_uses_the_index_not_keys_or_scan(data) -> None:
    for number in range(50):
        data.set(f"unrelated:{number}", "x")
    held = [distlock.lock(f"job:{number}", ttl=5) for number in range(5)]
    for lk in held:
        lk.acquire()
    data.config_resetstat()
    assert [info.name for info in locks["default"].held()] == [f"job:{n}" for n in range(5)]
    stats = data.info("commandstats")
    assert not any(command in stats for command in ("cmdstat_keys", "cmdstat_scan"))
    for lk in held:
        lk.release()


def test_index_forgets_locks_whose_holders_crashed(data) -> None:
    for number in range(20):
        distlock.lock(f"crashed:{number}", ttl=0.05).acquire()  # never released
    time.sleep(0.1)
    assert locks["default"].held() == []
    layout = locks["default"].layout
    assert sum(data.zcard(key) for key in layout.index_keys) == 0


def test_the_index_knows_when_each_lock_was_acquired(data) -> None:
    first = distlock.lock("since:first", ttl=5)
    first.acquire()
    time.sleep(0.01)
    second = distlock.lock("since:second", ttl=5)
    second.acquire()
    first.extend(ttl=60)
    entries = {entry.name: entry for entry in locks["default"].exclusive.list("since:")}
    for lk in (first, second):
        info = lk.backend.info(lk.name)
        assert entries[lk.name].acquired == info.acquired_at.timestamp()
    assert entries["since:first"].acquired < entries["since:second"].acquired
    assert entries["since:first"].lease_end > entries["since:second"].lease_end
    first.release()
    second.release()
    layout = locks["default"].layout
    assert sum(data.zcard(key) for key in layout.index_keys) == 0  # released: forgotten


def test_waiter_survives_a_missed_notification(data) -> None:
    holder = distlock.lock("missed", ttl=30)
    holder.acquire()
    result = {}

    def wait() -> None:
        started = time.monotonic()
        result["acquired"] = distlock.lock("missed", ttl=5).acquire(wait=10)
        result["waited"] = time.monotonic() - started

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    # The lock disappears without a release script (no notification is sent).
    data.delete(locks["default"].layout.keys_for("missed").lock)
    thread.join()
    assert result["acquired"]
    # woken by the bounded fallback retry, not by the holder's 30 s lease
    assert result["waited"] < 0.2 + locks["default"].max_block + 0.5


def test_fencing_tokens_keep_rising_when_the_server_loses_its_data(data) -> None:
    with distlock.lock("fence-restart", ttl=5) as lk:
        before = lk.fencing_token
    data.flushall()  # as after a restart with no persistence
    with distlock.lock("fence-restart", ttl=5) as lk:
        assert lk.fencing_token > before


def test_fencing_memory_is_one_key_per_bucket_that_never_expires(data) -> None:
    layout = locks["default"].layout
    with distlock.lock("fence-a", ttl=5) as lk:
        first = lk.fencing_token
    fence_key = layout.keys_for("fence-a").fence
    assert data.keys("*") == [fence_key]  # nothing is left behind per name
    assert data.pttl(fence_key) == -1 and int(data.get(fence_key)) == first
    # As if the server's clock had stepped back 1,000 s: the remembered token wins, for this
    # name and for every other name of the bucket.
    ahead = first + 1_000_000_000
    data.set(fence_key, ahead)
    neighbour = next(
        f"fence-{n}" for n in range(10_000) if layout.keys_for(f"fence-{n}").fence == fence_key
    )
    tokens = []
    for name in ("fence-a", neighbour, "fence-a"):
        with distlock.lock(name, ttl=5) as lk:
            tokens.append(lk.fencing_token)
    assert tokens == [ahead + 1, ahead + 2, ahead + 3]


def test_a_lock_acquired_with_its_lease_left_to_run_out_keeps_its_token_memory(data) -> None:
    lk = distlock.lock("fence-expired", ttl=0.05)
    lk.acquire()  # never released: the lease runs out, as after a crash
    first = lk.fencing_token
    fence_key = locks["default"].layout.keys_for("fence-expired").fence
    time.sleep(0.1)
    ahead = first + 1_000_000_000
    data.set(fence_key, ahead)  # a clock that stepped back 1,000 s
    with distlock.lock("fence-expired", ttl=5) as again:
        assert again.fencing_token == ahead + 1


def test_metadata_is_json_never_pickle(data) -> None:
    with distlock.lock("meta", ttl=5, purpose="nightly export"):
        # TOKEN FENCE ACQUIRED_MS RENEWALS DEPTH METADATA (redis_ops/lua/acquire.lua)
        value = data.get(locks["default"].layout.keys_for("meta").lock)
        stored = (value.decode() if isinstance(value, bytes) else value).split(" ", 5)[5]
    import json

    assert json.loads(stored)["purpose"] == "nightly export"


def test_released_lock_is_handed_to_the_waiter_not_to_a_newcomer(data) -> None:
    holder = distlock.lock("fair", ttl=30)
    holder.acquire()
    order = []

    def waiter() -> None:
        lk = distlock.lock("fair", ttl=5)
        lk.acquire(wait=10)
        order.append("waiter")
        time.sleep(0.3)  # hold it long enough that a barger could not sneak in after us
        lk.release()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.2)
    holder.release()
    # The releasing process tries to take the lock straight back (barging): the lock is
    # reserved for the waiter that was already queued.
    barger = distlock.lock("fair", ttl=5)
    got_it = barger.acquire(wait=0)
    thread.join()
    if got_it:
        barger.release()
    assert order == ["waiter"]
    assert not got_it


def test_a_grant_that_arrives_after_its_lease_ended_is_given_back(data, monkeypatch) -> None:
    backend = locks["default"]
    original = backend.exclusive.try_acquire

    def slow_reply(*args):
        attempt = original(*args)
        time.sleep(0.15)  # the reply is late: the 0.1 s lease is over on the client's clock
        return attempt

    monkeypatch.setattr(backend.exclusive, "try_acquire", slow_reply)
    lk = distlock.lock("late", ttl=0.1)
    assert lk.acquire(wait=0) is False
    assert lk.token is None
    monkeypatch.undo()
    assert not distlock.lock("late").locked()


def test_an_older_clients_calls_still_work_beside_the_shorter_ones(data) -> None:
    """acquire.lua's ARGV[6] (waited) and ARGV[7] (grace), release.lua's ARGV[4] and
    leave_queue.lua's ARGV[2] became optional (issue 42): a client that still sends them gets
    the same locks, queue and handoff as one that leaves them out."""
    from distlock.backends.redis_ops import holds

    layout = locks["default"].layout
    k = layout.keys_for("compat")
    acquire_keys = [k.lock, k.fence, k.waiters, k.live, k.index]
    release_keys = [k.lock, k.waiters, k.live, k.index]

    def run(script, keys, *args):
        return data.eval(script.source, len(keys), *keys, *args)

    old = run(holds.ACQUIRE, acquire_keys, "old", 5000, "{}", "compat", 0, "0", 250)
    assert isinstance(old, str)
    queued = run(holds.ACQUIRE, acquire_keys, "new", 5000, "{}", "compat", 5000)
    assert queued[0] == 0 and queued[2] == 0  # held by the old form's token; queued first
    assert run(holds.RELEASE, release_keys, "old", "compat", "1", 250) == 1
    assert data.get(k.lock) == "=new"
    assert 0 < data.pttl(k.lock) <= 250  # the grace the old client sent
    taken = run(holds.ACQUIRE, acquire_keys, "new", 5000, "{}", "compat", 5000)
    assert isinstance(taken, str)
    # A queued old-form waiter, handed the lock by a release that leaves the grace out.
    run(holds.ACQUIRE, acquire_keys, "older", 5000, "{}", "compat", 5000, "0", 250)
    assert run(holds.RELEASE, release_keys, "new", "compat", "1") == 1
    assert data.get(k.lock) == "=older"
    assert 0 < data.pttl(k.lock) <= 250  # the scripts' default: HANDOFF_GRACE_MS
    assert isinstance(
        run(holds.ACQUIRE, acquire_keys, "older", 5000, "{}", "compat", 5000, "1", 250), str
    )
    assert not data.exists(k.waiters, k.live, k.waiters + "|about")
    assert run(holds.LEAVE_QUEUE, [k.lock, k.waiters, k.live], "gone", 250) == 1
    assert run(holds.RELEASE, release_keys, "older", "compat", "1") == 1
    assert not data.exists(k.lock) and data.zscore(k.index, "compat") is None


def test_a_woken_non_fair_waiter_that_takes_the_free_lock_leaves_the_queue(data) -> None:
    """A non-fair release wakes the queue's head and leaves the lock free (it stays queued);
    its acquire then takes the lock by SET NX. acquire.lua must take it out of the queue there
    (since issue 42 it reads that it may be queued off the queue's existence, no more off the
    waited flag): a token left queued is the head the next non-fair release wakes, and the
    waiters behind it are never woken."""
    from distlock.backends.redis_ops import holds

    layout = locks["default"].layout
    k = layout.keys_for("nonfair")
    acquire_keys = [k.lock, k.fence, k.waiters, k.live, k.index]
    release_keys = [k.lock, k.waiters, k.live, k.index]

    def acquire(token, patience):
        return data.eval(
            holds.ACQUIRE.source, 5, *acquire_keys, token, 5000, "{}", "nonfair", patience
        )

    def release(token):
        return data.eval(holds.RELEASE.source, 4, *release_keys, token, "nonfair", "1")

    assert isinstance(acquire("!a", 0), str)
    assert acquire("!b", 5000)[2] == 0 and acquire("!c", 5000)[2] == 1  # queued, in order
    assert release("!a") == 1
    assert data.lpop(f"{k.waiters}:!b") == "1"  # woken (its BLPOP), the lock left free
    assert isinstance(acquire("!b", 5000), str)  # taken by SET NX
    assert data.zscore(k.waiters, "!b") is None and data.zscore(k.live, "!b") is None
    assert data.hget(k.waiters + "|about", "!b") is None
    assert release("!b") == 1
    assert data.llen(f"{k.waiters}:!c") == 1  # the next waiter is woken, not "!b" again


def test_the_name_goes_out_in_the_clients_encoding_in_every_call(data, settings) -> None:
    """OPTIONS may set the client's ``encoding`` (a redis-py argument, accepted by the
    checks). Every call sends the name in it, the hot pair's too: issue 42 sent the pair's name
    as UTF-8 bytes, and the renewal's as the client encodes it, so a held name got two index
    entries, and its release left the renewal's behind."""
    default = settings.DISTLOCK["default"]
    default["OPTIONS"] = {**default["OPTIONS"], "encoding": "latin-1"}
    locks.reset()
    lk = distlock.lock("caf\u00e9", ttl=5)
    assert lk.acquire()
    lk.extend(10)  # a renewal: extend.lua sends the name too
    index = locks["default"].layout.keys_for("caf\u00e9").index
    raw = redis.Redis.from_url(settings.DISTLOCK["default"]["LOCATION"])  # bytes replies
    assert raw.zrange(index, 0, -1) == ["caf\u00e9".encode("latin-1")]
    lk.release()
    assert raw.zrange(index, 0, -1) == []
