"""LockedCommandMixin across real processes: ``manage.py send_digest`` (the demo project's
command) started as separate processes against a real redis-server."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

import distlock
from devkit.processes import child_env, end_processes, start_process
from devkit.redis_server import RedisServer

LOCK = "send_digest:weekly"
SKIP_LINE = re.compile(
    r"send_digest: skipped, the lock 'send_digest:weekly' is held by (?P<host>\S+) "
    r"pid (?P<pid>\d+) since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(manage\.py send_digest.*\)\.\n"
)
pytestmark = pytest.mark.django_db(databases=[])

Start = Callable[..., subprocess.Popen]


def _starter(url: str, tmp_path: Path) -> tuple[Start, list[subprocess.Popen]]:
    env = child_env(
        settings="testproject.settings",
        python_path=False,  # as the demo's manage.py runs (see child_env)
        REDIS_URL=url,
        DISTLOCK_KEY_PREFIX="test",  # the prefix the test process's settings use
        DJANGO_DB_PATH=str(tmp_path / "db.sqlite3"),
        PYTHONUNBUFFERED="1",
    )
    started: list[subprocess.Popen] = []

    def start(*arguments: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen:
        process = start_process(
            [sys.executable, "manage.py", *arguments],
            env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    return start, started


@pytest.fixture
def manage(redis_backend: str, tmp_path: Path) -> Iterator[Start]:
    """Start ``python manage.py ...`` of the demo project, on the test's Redis server."""
    start, started = _starter(redis_backend, tmp_path)
    yield start
    end_processes(started)


def finish(process: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def wait_until_held(process: subprocess.Popen, timeout: float = 20) -> distlock.LockInfo:
    """Return the lock's info once ``process`` holds it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = distlock.locks["default"].info(LOCK)
        if info is not None and info.pid == process.pid:
            return info
        assert process.poll() is None, f"the command ended early: {process.communicate()}"
        time.sleep(0.05)
    raise AssertionError(f"{process.args} did not take the lock within {timeout}s")


def work_interval(out: str) -> tuple[datetime, datetime]:
    """Return when the demo started and finished sending, from its time-stamped lines."""
    stamps = [datetime.fromisoformat(line.split(" ", 1)[0]) for line in out.splitlines()]
    assert "digest is sent" in out.splitlines()[-1], out
    return stamps[0], stamps[-1]


def test_four_copies_at_once_one_runs_three_skip_naming_it(manage: Start) -> None:
    copies = [manage("send_digest", "--seconds", "5") for _ in range(4)]
    results = {process.pid: finish(process) for process in copies}
    ran = [pid for pid, (_, out, _) in results.items() if "digest is sent" in out]
    assert len(ran) == 1, results
    runner = ran[0]
    assert results[runner][0] == 0 and results[runner][2] == "", "a run writes no stderr"
    for pid, (code, out, err) in results.items():
        if pid == runner:
            continue
        assert code == 0 and out == ""
        line = SKIP_LINE.fullmatch(err)
        assert line, f"not the one-line skip message: {err!r}"
        assert int(line["pid"]) == runner
    assert distlock.locks["default"].info(LOCK) is None, "released at the end"


def test_lock_wait_runs_all_four_one_after_another(manage: Start) -> None:
    copies = [manage("send_digest", "--seconds", "0.6", "--lock-wait", "30") for _ in range(4)]
    results = [finish(process) for process in copies]
    assert [code for code, _, _ in results] == [0] * 4, results
    assert all(err == "" for _, _, err in results), results
    intervals = sorted(work_interval(out) for _, out, _ in results)
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert end <= start, f"two copies overlapped: {intervals}"


def test_short_lease_is_renewed_throughout_a_long_run(manage: Start) -> None:
    command = manage("send_digest", "--lock-ttl", "2", "--seconds", "8")
    first = wait_until_held(command)
    attempts, got_in_at = 0, None
    while command.poll() is None and got_in_at is None:
        intruder = distlock.lock(LOCK, ttl=5, wait=0)
        if intruder.acquire():
            got_in_at = time.time()  # legitimate only once the command has released
            intruder.release()
            break
        info = distlock.locks["default"].info(LOCK)
        assert info is None or info.token == first.token, "the holder changed during the run"
        attempts += 1
        time.sleep(0.5)
    code, out, err = finish(command)
    assert code == 0 and "digest is sent" in out and err == "", (code, out, err)
    started, ended = work_interval(out)
    assert (ended - started).total_seconds() >= 8, "8 s of work on a 2 s lease"
    assert attempts >= 8, f"only {attempts} attempts while the command ran"
    if got_in_at is not None:
        assert got_in_at >= ended.timestamp(), "another process got in while the work ran"
    assert distlock.locks["default"].info(LOCK) is None, "released at the end"


def test_force_release_stops_the_command_within_a_renewal_interval(manage: Start) -> None:
    ttl = 1.5
    command = manage("send_digest", "--lock-ttl", str(ttl), "--seconds", "60")
    wait_until_held(command)
    assert distlock.locks["default"].force_release(LOCK)
    released = time.monotonic()
    code, out, err = finish(command)
    stopped_after = time.monotonic() - released
    assert code == 1, (code, out, err)
    assert f"CommandError: Lost the lock {LOCK!r}" in err
    assert "digest is sent" not in out
    # One renewal interval is ttl / 3 = 0.5 s; measured here, the process has exited
    # 0.57-0.65 s after the release. The slack covers its exit and a loaded machine.
    assert stopped_after < ttl / 3 + 0.75, f"stopped {stopped_after:.2f}s after the release"


def test_a_force_release_found_after_the_work_says_the_work_finished(manage: Start) -> None:
    # lock_ttl 30: the next renewal is 10 s away, so only the release at the end finds that
    # the lock is gone.
    command = manage("send_digest", "--seconds", "2")
    wait_until_held(command)
    assert distlock.locks["default"].force_release(LOCK)
    code, out, err = finish(command)
    assert code == 3, (code, out, err)
    assert "digest is sent" in out
    assert err.startswith(
        f"CommandError: send_digest finished, but its lock {LOCK!r} had been lost by then (its "
        "lease was force-released, ran out while the process was paused or was too short, or "
        "vanished when the lock server restarted empty, or the lock server was unreachable for "
        "longer than the lease): from that moment another copy may have run alongside it. "
    )
    assert "so the lease was not too short" in err  # issue 40: the cause it can tell


def test_sigkill_leaves_the_lock_to_its_lease(manage: Start) -> None:
    command = manage("send_digest", "--lock-ttl", "2", "--seconds", "60")
    wait_until_held(command)
    command.send_signal(signal.SIGKILL)
    killed = time.time()
    command.wait()
    left = distlock.locks["default"].info(LOCK)
    assert left is not None, "a killed holder cannot release; its lease must run out"
    free_at = killed + left.ttl_remaining
    code, out, err = finish(manage("send_digest", "--seconds", "0", "--lock-wait", "10"))
    assert code == 0 and "digest is sent" in out, (code, out, err)
    started, _ = work_interval(out)
    assert started.timestamp() >= free_at - 0.3, "ran before the dead holder's lease ended"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_signal_releases_the_lock_at_once(manage: Start, stop: signal.Signals) -> None:
    command = manage("send_digest", "--seconds", "60")  # the demo's lease: 30 s
    wait_until_held(command)
    # The server shows the lock held a moment before the command has the reply: stop it once
    # it is sending (its first line), as the test means to.
    assert command.stdout is not None and "sending" in command.stdout.readline()
    command.send_signal(stop)
    code, out, err = finish(command, timeout=10)
    assert code == 128 + stop, (code, out, err)
    assert f"Stopped by {stop.name}; released the lock {LOCK!r}." in err
    assert distlock.locks["default"].info(LOCK) is None, "released, not left to expire"
    code, out, _ = finish(manage("send_digest", "--seconds", "0"))
    assert code == 0 and "digest is sent" in out


def test_redis_unreachable_the_command_does_not_run(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    start, started = _starter(private_redis.url, tmp_path)
    private_redis.stop()
    try:
        code, out, err = finish(start("send_digest", "--seconds", "0"))
    finally:
        end_processes(started)
    assert code == 1, (code, out, err)
    assert out == "", "the work never started"
    assert (
        "CommandError: Did not run: the lock server of DISTLOCK['default'] cannot be "
        "reached, so the lock 'send_digest:weekly' could not be taken." in err
    )


def test_operator_command_exit_statuses(manage: Start) -> None:
    code, out, err = finish(manage("distlock", "release", "no such lock", "--yes"))
    assert code == 1 and out == ""
    assert err == "CommandError: The lock 'no such lock' is not held (alias 'default').\n"
    holder = distlock.lock("reports:daily", ttl=30)
    assert holder.acquire()
    code, out, err = finish(manage("distlock", "release", "reports:daily"))
    assert code == 1 and "stdin is not a terminal. Pass --yes" in err, "never without asking"
    assert holder.owned()
    code, out, err = finish(manage("distlock", "release", "reports:daily", "--yes"))
    assert code == 0 and out.startswith("Released the lock 'reports:daily'"), (code, out, err)
    assert not holder.locked()


def test_release_asks_on_a_real_terminal(manage: Start) -> None:
    holder = distlock.lock("reports:daily", ttl=30)
    assert holder.acquire()
    controller, terminal = os.openpty()
    try:
        command = manage("distlock", "release", "reports:daily", stdin=terminal)
        os.write(controller, b"y\n")
        code, out, err = finish(command)
    finally:
        os.close(terminal)
        os.close(controller)
    assert err.startswith("Release the lock 'reports:daily', held by "), err
    assert code == 0 and out.startswith("Released the lock 'reports:daily'"), (code, out, err)
    assert not holder.locked()
