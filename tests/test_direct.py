"""The direct command path (distlock.backends.direct): it skips redis-py's command layer,
so it must itself survive what that layer would: flushed scripts, connections the server
closed, replies that never came, threads, forks, and clients it cannot drive directly."""
from __future__ import annotations

import os
import threading
import time
import warnings

import pytest
import redis

import distlock
from distlock.backends import lines
from distlock.exceptions import BackendUnavailable
from distlock.handler import locks
from tests.configs import distlock_settings

pytestmark = pytest.mark.django_db(databases=[])


def cycle(name: str = "calls") -> int:
    with distlock.lock(name, ttl=5) as lk:
        return lk.fencing_token


def test_scripts_are_loaded_again_after_the_server_forgets_them(redis_backend: str) -> None:
    cycle()
    redis.Redis.from_url(redis_backend).script_flush()
    assert cycle() > 0
    assert distlock.lock("calls").locked() is False


def test_a_connection_the_server_closed_is_replaced_before_use(redis_backend: str) -> None:
    cycle()
    admin = redis.Redis.from_url(redis_backend)
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
    assert cycle() > 0  # not BackendUnavailable: the idle connection was checked first


def test_a_reply_that_came_too_late_is_never_read_as_the_next_one(private_redis) -> None:
    lk = distlock.lock("late-reply", ttl=30)
    assert lk.acquire(wait=0)
    private_redis.pause()
    try:
        with pytest.raises(BackendUnavailable):
            distlock.lock("other", ttl=5).acquire(wait=0)
    finally:
        private_redis.resume()
    # The paused server answers the timed-out acquire of "other" once resumed; had the
    # connection been reused, that reply would be taken for this release's.
    lk.release()
    assert not lk.locked()


def test_threads_each_use_a_connection_of_their_own(redis_backend: str) -> None:
    errors: list[BaseException] = []

    def work(number: int) -> None:
        try:
            for round_ in range(50):
                cycle(f"thread:{number}:{round_ % 3}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    caller = locks["default"]._direct
    assert 1 <= len(caller._idle) <= 8


def test_a_forked_child_never_shares_the_parents_connection(redis_backend: str) -> None:
    cycle()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        status = 0
        try:
            for _ in range(200):
                cycle("fork:child")
        except BaseException:
            status = 1
        os._exit(status)
    for _ in range(200):
        cycle("fork:parent")  # interleaved replies would break one side or the other
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_clients_it_cannot_drive_directly_go_through_redis_py(settings, redis_url) -> None:
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", redis_url)
    settings.DISTLOCK["default"]["OPTIONS"] = {"single_connection_client": True}
    locks.reset()
    first = cycle("single")
    redis.Redis.from_url(redis_url).script_flush()
    assert cycle("single") > first
    assert locks["default"]._direct._pool is None
    locks.reset()


def direct_calls():
    return locks["default"].direct


def test_with_hiredis_and_resp2_it_drives_the_socket_itself(redis_backend: str) -> None:
    cycle()
    assert direct_calls()._line is lines.SocketLine
    assert isinstance(direct_calls()._idle[0], lines.SocketLine)


@pytest.mark.parametrize("options", [{"protocol": 3}, {"encoding": "latin-1"}])
def test_options_it_does_not_speak_go_through_the_connection(settings, redis_url,
                                                             options) -> None:
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", redis_url)
    settings.DISTLOCK["default"]["OPTIONS"].update(options)
    locks.reset()
    first = cycle("fallback")
    redis.Redis.from_url(redis_url).script_flush()
    assert cycle("fallback") > first
    assert direct_calls()._line is lines.ConnectionLine
    locks.reset()


def test_an_error_reply_raises_redis_pys_error_and_keeps_the_connection(
        redis_backend: str) -> None:
    redis.Redis.from_url(redis_backend).set("not-a-list", "x")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        direct_calls().command("BLPOP", "not-a-list", 0.01)
    line = direct_calls()._idle[0]
    assert direct_calls().command("PING") == b"PONG"
    assert direct_calls()._idle[0] is line  # the same connection, still in step


def test_a_socket_redis_py_reopened_gets_a_reader_of_its_own(redis_backend: str) -> None:
    cycle()
    line = direct_calls()._idle[0]
    line.connection.disconnect()
    line.connection.connect()  # a new socket the line has not read from yet
    assert cycle() > 0
    assert line.sock is line.connection._sock


def test_a_connection_returned_to_the_pool_is_in_step_for_redis_py(redis_backend: str) -> None:
    for round_ in range(3):
        cycle(f"shared:{round_}")
    backend = locks["default"]
    backend.direct.close()  # the connections go back to the client's pool
    backend.client.set("after", "direct")
    assert backend.client.get("after") == b"direct"
    assert cycle("shared:again") > 0


def test_a_command_larger_than_the_send_buffer_is_written_whole() -> None:
    # The first write goes straight to the non-blocking descriptor and may take only part;
    # the rest must follow, in order, within the socket's timeout.
    import socket

    sender, receiver = socket.socketpair()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sender.settimeout(5)
    payload = os.urandom(2_000_000)
    received = bytearray()

    def drain() -> None:
        while len(received) < len(payload):
            received.extend(receiver.recv(65536))

    reader = threading.Thread(target=drain)
    reader.start()
    lines._write(sender, payload)
    reader.join(timeout=10)
    sender.close()
    receiver.close()
    assert bytes(received) == payload


def pings(url: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return stats.get("cmdstat_ping", {}).get("calls", 0)


@pytest.mark.parametrize("options", [{}, {"protocol": 3}])
def test_health_check_interval_pings_a_connection_idle_that_long(settings, redis_url,
                                                                options) -> None:
    # A NAT or firewall may drop an idle connection without a word; redis-py's
    # health_check_interval is how users ask for a PING before reusing one.
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", redis_url)
    settings.DISTLOCK["default"]["OPTIONS"].update(health_check_interval=1, **options)
    locks.reset()
    cycle("health")
    before = pings(redis_url)
    cycle("health")
    assert pings(redis_url) == before  # used moments ago: no PING
    time.sleep(1.2)
    cycle("health")
    assert pings(redis_url) == before + 1
    locks.reset()
