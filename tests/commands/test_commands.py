"""LockedCommandMixin and ``manage.py distlock`` in this process, through call_command, on a
real Redis server. Behaviour across processes is in test_command_processes.py."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, OutputWrapper

import distlock
from devkit.configs import distlock_settings
from devkit.processes import child_env, run_python
from distlock.management import LockedCommandMixin, LockSkipped
from distlock.management.mixin import FINISHED_BUT_LOST_EXIT_CODE
from distlock.signals import lock_force_released
from testproject.management.commands.send_digest import Command as SendDigest

pytestmark = pytest.mark.django_db(databases=[])


class Probe(LockedCommandMixin, BaseCommand):
    """Records what it saw of its own lock while handle() ran."""

    lock_ttl = 0.6
    seen: distlock.LockInfo | None = None

    def add_arguments(self, parser: Any) -> None:  # no super(): the mixin's options stay
        parser.add_argument("--sleep", type=float, default=0)
        parser.add_argument("--swallow", action="store_true")

    def handle(self, *args: Any, sleep: float, swallow: bool, **options: Any) -> None:
        type(self).seen = distlock.locks["default"].info(self.lock_plan(args, options).name)
        try:
            time.sleep(sleep)
        except Exception:
            if not swallow:
                raise
            time.sleep(sleep)  # a careless command that carries on
        self.stdout.write("done")


Probe.__module__ = "shop.management.commands.rebuild_index"  # as Django would load it


def run(command: BaseCommand, *args: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def hold(name: str, ttl: float = 30) -> distlock.Lock:
    holder = distlock.lock(name, ttl=ttl, purpose="held by the test")
    assert holder.acquire(wait=0)
    return holder


def release_soon(name: str, after: float) -> threading.Thread:
    """Force-release ``name`` once it is held and ``after`` seconds have passed."""

    def release() -> None:
        deadline = time.monotonic() + 10
        while distlock.locks["default"].info(name) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after)
        distlock.locks["default"].force_release(name)

    thread = threading.Thread(target=release)
    thread.start()
    return thread


# --- the mixin ---------------------------------------------------------------------------
def test_the_lock_is_held_while_handle_runs_and_nothing_goes_to_stderr(redis_backend: str):
    out, err = run(Probe())
    assert (out, err) == ("done\n", "")
    seen = Probe.seen
    assert seen is not None and seen.name == "rebuild_index", "default name: the command's"
    assert seen.pid == os.getpid() and seen.purpose == "manage.py rebuild_index"
    assert distlock.locks["default"].info("rebuild_index") is None


def test_a_held_lock_skips_the_run_with_one_line_naming_the_holder(redis_backend: str):
    holder = hold("send_digest:weekly")
    out, err = run(SendDigest(), "--seconds", "0")
    assert out == ""
    when = f"{distlock.locks['default'].info('send_digest:weekly').acquired_at:%Y-%m-%d %H:%M:%S}"
    assert err == (
        f"send_digest: skipped, the lock 'send_digest:weekly' is held by "
        f"{holder.backend.info(holder.name).host} pid {os.getpid()} since {when} UTC "
        "(held by the test).\n"
    )
    assert run(SendDigest(), "--seconds", "0", verbosity=0) == ("", ""), "-v 0 is quiet"
    assert holder.owned()


def test_skip_exit_code(redis_backend: str):
    class Strict(SendDigest):
        lock_skip_exit_code = 3

    hold("send_digest:weekly")
    with pytest.raises(LockSkipped) as raised:
        run(Strict(), "--seconds", "0")
    assert raised.value.returncode == 3

    # From the command line (cron), the process exits with that status after the one line,
    # without a "CommandError: ..." traceback line.
    command, err = Strict(), io.StringIO()
    command.stderr = OutputWrapper(err)
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "send_digest", "--seconds", "0"])
    assert exited.value.code == 3
    assert ": skipped, the lock 'send_digest:weekly' is held by" in err.getvalue()
    assert "CommandError" not in err.getvalue()


def test_option_values_in_the_name_are_escaped(redis_backend: str):
    hold("send_digest:a%3Ab%2F%7Bc%7D%20d")
    _, err = run(SendDigest(), "--seconds", "0", "--list", "a:b/{c} d")
    assert "the lock 'send_digest:a%3Ab%2F%7Bc%7D%20d' is held by" in err
    out, err = run(SendDigest(), "--seconds", "0", "--list", "a:b")
    assert "digest is sent" in out and err == "", "another list, another lock"


def test_a_name_field_that_is_no_option_is_reported(redis_backend: str):
    class Typo(SendDigest):
        lock_name = "send_digest:{tenant}"

    with pytest.raises(
        CommandError,
        match=r"uses \{tenant\}, which is not an option .*"
        r"\{mailing_list\}",
    ):
        run(Typo(), "--seconds", "0")


def test_no_lock_runs_even_when_held(redis_backend: str):
    hold("send_digest:weekly")
    out, err = run(SendDigest(), "--seconds", "0", "--no-lock")
    assert "digest is sent" in out and err == ""


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--lock-wait", "soon"], "--lock-wait expects a number of seconds, not 'soon'."),
        (["--lock-wait", "-1"], "--lock-wait must be >= 0 seconds, not -1.0."),
        (["--lock-wait", "inf"], "--lock-wait must be a finite number of seconds, not inf."),
        (["--lock-ttl", "0"], "--lock-ttl must be > 0 seconds, not 0.0."),
        (["--lock-ttl", "nan"], "--lock-ttl must be a finite number of seconds, not nan."),
        (["--lock-ttl", "0.0001"], "--lock-ttl must be at least 0.001 seconds"),
    ],
)
def test_bad_option_values_are_refused_before_anything_runs(
    redis_backend: str, arguments: list[str], message: str
):
    with pytest.raises(CommandError) as raised:
        run(SendDigest(), "--seconds", "0", *arguments)
    assert str(raised.value).startswith(message)
    assert distlock.locks["default"].count() == 0


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("lock_ttl", "60", "lock_ttl must be a number of seconds, not str '60'."),
        ("lock_wait", -5, "lock_wait must be >= 0 seconds, not -5."),
        ("lock_skip_exit_code", 300, "lock_skip_exit_code must be an int from 0 to 255, not 300."),
        ("lock_fair", "no", "lock_fair must be True, False or None, not 'no'."),
    ],
)
def test_bad_class_settings_are_reported(
    redis_backend: str, attribute: str, value: object, message: str
):
    broken = type("Broken", (SendDigest,), {attribute: value})
    with pytest.raises(CommandError, match=f"^{message}$".replace(".", r"\.")):
        run(broken(), "--seconds", "0")


def test_lost_lease_interrupts_a_sleeping_handle_and_restores_signal_handlers(redis_backend: str):
    previous = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
    }
    releaser = release_soon("rebuild_index", after=0.1)
    started = time.monotonic()
    with pytest.raises(CommandError, match=r"^Lost the lock 'rebuild_index' while") as raised:
        run(Probe(), "--sleep", "30")
    releaser.join()
    assert raised.value.returncode == 1
    assert time.monotonic() - started < 10, "interrupted, not slept through"
    assert {signum: signal.getsignal(signum) for signum in previous} == previous


def test_a_swallowed_interruption_still_fails_the_command(redis_backend: str):
    releaser = release_soon("rebuild_index", after=0.1)
    with pytest.raises(CommandError, match=r"^Lost the lock 'rebuild_index'") as raised:
        run(Probe(), "--sleep", "1", "--swallow")
    releaser.join()
    assert raised.value.returncode == 1
    assert (
        "caught the interruption and ran on, so from that moment it may have run "
        "alongside another copy." in str(raised.value)
    )


class ReleasedAtTheEnd(Probe):
    """Force-released by an operator just before handle() returns: the loss is found only
    when the command releases (the next renewal would be 10 s away)."""

    lock_ttl = 30

    def handle(self, *args: Any, **options: Any) -> None:
        assert distlock.locks["default"].force_release("rebuild_index")
        self.stdout.write("done")


ReleasedAtTheEnd.__module__ = Probe.__module__


def test_a_lock_lost_after_the_work_finished_is_reported_as_such(redis_backend: str):
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(ReleasedAtTheEnd(), stdout=out, stderr=io.StringIO())
    assert out.getvalue() == "done\n", "the work ran to its end"
    assert raised.value.returncode == FINISHED_BUT_LOST_EXIT_CODE == 3
    message = str(raised.value)
    assert message.startswith(
        "rebuild_index finished, but its lock 'rebuild_index' had been lost by then (its lease "
        "was force-released, ran out while the process was paused or was too short, or "
        "vanished when the lock server restarted empty, or the lock server was unreachable for "
        "longer than the lease): from that moment another copy may have run alongside it. "
    )
    # Issue 40: and then the cause this run can tell (force-released, not a short lease).
    assert "lease left by this process's clock, so the lease was not too short" in message
    assert "force-released" in message.split("alongside it. ", 1)[1]
    assert "stopped" not in str(raised.value)


def test_off_the_main_thread_a_lost_lease_is_reported_when_handle_returns(redis_backend: str):
    releaser = release_soon("rebuild_index", after=0.1)
    outcome: list[BaseException | tuple[str, str]] = []

    def command() -> None:
        try:
            outcome.append(run(Probe(), "--sleep", "1.5"))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=command)
    thread.start()
    thread.join(timeout=20)
    releaser.join()
    assert isinstance(outcome[0], CommandError), outcome
    assert str(outcome[0]).startswith(
        "rebuild_index finished, but its lock 'rebuild_index' had been lost by then"
    )
    assert outcome[0].returncode == 3


PENDING_SIGNAL_SCRIPT = """
import signal, threading
from distlock.management.interrupt import CommandGuard
guard = CommandGuard("x")
with guard.installed():
    # As if the renewer's SIGUSR1 were still on its way when the handlers are restored.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
assert signal.SIGUSR1 not in signal.sigpending()
assert signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
print("alive")
"""


def test_a_pending_lost_signal_does_not_kill_the_process_after_the_run():
    finished = run_python(PENDING_SIGNAL_SCRIPT, timeout=30)
    assert (finished.returncode, finished.stdout) == (0, "alive\n"), finished


def test_ctrl_c_while_waiting_for_the_lock(redis_backend: str):
    hold("rebuild_index")
    main = threading.main_thread().ident
    threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT)).start()
    Probe.seen = None
    with pytest.raises(CommandError, match=r"^Interrupted while waiting for the lock") as raised:
        run(Probe(), "--lock-wait", "10")
    assert raised.value.returncode == 130 and Probe.seen is None


def test_unreachable_lock_server_means_no_run(private_redis: Any):
    private_redis.stop()
    Probe.seen = None
    with pytest.raises(
        CommandError,
        match="^Did not run: the lock server of "
        r"DISTLOCK\['default'\] cannot be reached",
    ):
        run(Probe())
    assert Probe.seen is None, "handle() never ran"


# --- manage.py distlock ------------------------------------------------------------------
NAMES = ["reports:daily", "tenant 42/ünïcode {x}", "a*b"]


def distlock_command(*args: str, **options: Any) -> str:
    out = io.StringIO()
    call_command("distlock", *args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def test_list_json_matches_held(redis_backend: str):
    holders = [hold(name) for name in NAMES]
    listed = json.loads(distlock_command("list", "--json"))
    held = [info.as_json_dict() for info in distlock.locks["default"].held()]
    assert [entry["name"] for entry in listed] == sorted(NAMES)
    for entry, expected in zip(listed, held, strict=True):
        assert entry.keys() == expected.keys()
        for field in ("ttl_remaining", "expires_at"):  # the clock moved on between the calls
            entry.pop(field), expected.pop(field)
        assert entry == expected
    assert {entry["token"] for entry in listed} == {holder.token for holder in holders}


def test_list_prefix_filters(redis_backend: str):
    for name in NAMES:
        hold(name)
    listed = json.loads(distlock_command("list", "--json", "--prefix", "tenant "))
    assert [entry["name"] for entry in listed] == ["tenant 42/ünïcode {x}"]


def test_list_table(redis_backend: str):
    assert distlock_command("list", "-v", "0") == "No locks are held.\n"  # -v 0: no server line
    holder = distlock.lock("reports:daily", ttl=30, purpose="nightly report")
    assert holder.acquire()
    lines = distlock_command("list", "-v", "0").splitlines()
    assert lines[0].split() == [
        "NAME",
        "HOLDER",
        "PURPOSE",
        "ACQUIRED",
        "(UTC)",
        "EXPIRES",
        "IN",
        "FENCING",
        "TOKEN",
        "WAITERS",
    ]
    info = holder.backend.info("reports:daily")
    assert lines[1].split() == [
        "reports:daily",
        f"{info.host}:{os.getpid()}",
        "nightly",
        "report",
        f"{info.acquired_at:%Y-%m-%d}",
        f"{info.acquired_at:%H:%M:%S}",
        lines[1].split()[6],
        str(holder.fencing_token),
        "0",
    ]
    assert lines[1].split()[6].endswith("s")
    assert (
        distlock_command("list", "--prefix", "zzz", "-v", "0")
        == "No locks starting with 'zzz' are held.\n"
    )


def test_list_covers_every_alias_and_reports_an_unreachable_one(settings: Any, redis_url: str):
    aliases, settings.CACHES = distlock_settings("redis", redis_url)
    dead = {**aliases["default"], "LOCATION": "redis://127.0.0.1:1/0", "KEY_PREFIX": "dead"}
    other = {**aliases["default"], "KEY_PREFIX": "other"}
    settings.DISTLOCK = {**aliases, "other": other}
    hold("reports:daily")
    assert distlock.lock("reports:daily", using="other").acquire()
    listed = json.loads(distlock_command("list", "--json"))
    assert [(entry["alias"], entry["name"]) for entry in listed] == [
        ("default", "reports:daily"),
        ("other", "reports:daily"),
    ]
    # Which server answered for each alias first (tests/commands/test_status.py), then the table.
    lines = distlock_command("list").splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == [
        "DISTLOCK['default']",
        "DISTLOCK['other']",
    ]
    assert lines[2].startswith("ALIAS ")
    assert [
        e["alias"] for e in json.loads(distlock_command("list", "--json", "--using", "other"))
    ] == ["other"]
    settings.DISTLOCK = {**settings.DISTLOCK, "dead": dead}
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"DISTLOCK\['dead'\]"):
        call_command("distlock", "list", "--json", stdout=out)
    assert out.getvalue() == "", "a listing without 'dead' would look complete: none at all"
    with pytest.raises(CommandError, match="DISTLOCK has no alias 'nope'"):
        distlock_command("list", "--using", "nope")


def test_common_options_after_the_action(redis_backend: str):
    hold("reports:daily")
    assert distlock_command("list", "-v", "0").splitlines()[1].startswith("reports:daily ")
    listed = json.loads(
        distlock_command(
            "list", "--json", "--settings", "devkit.settings", "--traceback", "--no-color"
        )
    )
    assert [entry["name"] for entry in listed] == ["reports:daily"]
    assert "fencing token:" in distlock_command("info", "reports:daily", "--verbosity", "2")
    with pytest.raises(CommandError, match="is not held"):
        distlock_command("release", "nope", "--yes", "-v", "0")


def test_info(redis_backend: str):
    holder = hold("reports:daily")
    text = distlock_command("info", "reports:daily")
    info = holder.backend.info("reports:daily")
    assert f"token:          {holder.token}\n" in text
    assert f"holder:         {info.host} pid {os.getpid()} thread {info.thread}\n" in text
    assert f"fencing token:  {holder.fencing_token}\n" in text
    as_json = json.loads(distlock_command("info", "reports:daily", "--json"))
    assert as_json["token"] == holder.token and as_json["alias"] == "default"
    with pytest.raises(CommandError, match=r"^The lock 'nope' is not held") as raised:
        distlock_command("info", "nope")
    assert raised.value.returncode == 1


def test_release_of_a_name_not_held_fails(redis_backend: str):
    with pytest.raises(
        CommandError, match=r"^The lock 'nope' is not held \(alias 'default'\)"
    ) as raised:
        distlock_command("release", "nope", "--yes")
    assert raised.value.returncode == 1


def test_release_with_a_stale_token_releases_nothing(redis_backend: str, caplog: Any):
    holder = hold("reports:daily")
    with pytest.raises(CommandError, match="held with another token") as raised:
        distlock_command("release", "reports:daily", "--token", "0" * 32, "--yes")
    assert raised.value.returncode == 1
    assert holder.owned()
    sent = []
    lock_force_released.connect(
        lambda **kwargs: sent.append(kwargs["name"]), weak=False, dispatch_uid="test_release"
    )
    try:
        with caplog.at_level(logging.INFO, logger="distlock"):
            out = distlock_command("release", "reports:daily", "--token", holder.token, "--yes")
    finally:
        lock_force_released.disconnect(dispatch_uid="test_release")
    assert out.startswith("Released the lock 'reports:daily' (alias 'default'), held by ")
    assert not holder.locked()
    assert sent == ["reports:daily"]
    assert any(
        "force-released 'reports:daily'" in record.getMessage()
        and holder.token in record.getMessage()
        for record in caplog.records
    )


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("answer", "released"), [("y\n", True), ("yes\n", True), ("n\n", False), ("", False)]
)
def test_release_asks_for_confirmation(redis_backend: str, answer: str, released: bool):
    holder = hold("reports:daily")
    err = io.StringIO()

    def call() -> None:
        call_command(
            "distlock",
            "release",
            "reports:daily",
            stdin=Terminal(answer),
            stdout=io.StringIO(),
            stderr=err,
        )

    if released:
        call()
    else:
        with pytest.raises(CommandError, match=r"^Not released: 'reports:daily' is still held"):
            call()
    assert err.getvalue().startswith("Release the lock 'reports:daily', held by ")
    assert err.getvalue().endswith("[y/N] ")
    assert holder.locked() is not released


def test_release_refuses_to_ask_without_a_terminal(redis_backend: str):
    holder = hold("reports:daily")
    with pytest.raises(CommandError, match=r"stdin is not a terminal. Pass --yes"):
        distlock_command("release", "reports:daily", stdin=io.StringIO("y\n"))
    assert holder.owned()


SIGNAL_AT_GRANT_SCRIPT = """
import os, signal, sys
import django
django.setup()
import distlock
from distlock.lock import Lock

real_acquire = Lock.acquire

def acquire_then_stop(self, *args, **kwargs):
    acquired = real_acquire(self, *args, **kwargs)
    signal.raise_signal(signal.SIGTERM)  # the worst moment: granted, handle() not started
    return acquired

Lock.acquire = acquire_then_stop
from django.core.management import ManagementUtility
ManagementUtility(["manage.py", "send_digest", "--seconds", "30"]).execute()
"""


def test_a_stop_signal_right_after_the_grant_releases_the_lock(redis_backend: str, tmp_path: Path):
    env = child_env(
        settings="testproject.settings",
        python_path=False,  # as the demo's manage.py runs (see child_env)
        REDIS_URL=redis_backend,
        DISTLOCK_KEY_PREFIX="test",
        DJANGO_DB_PATH=str(tmp_path / "db.sqlite3"),
    )
    finished = run_python(SIGNAL_AT_GRANT_SCRIPT, env)
    assert finished.returncode == 128 + signal.SIGTERM, finished
    assert (
        "Interrupted while waiting for the lock 'send_digest:weekly' (SIGTERM)" in finished.stderr
    )
    assert "digest is sent" not in finished.stdout
    assert distlock.locks["default"].info("send_digest:weekly") is None  # released, not leased


# --- semaphores ---------------------------------------------------------------------------
def hold_permits(name: str, limit: int, count: int) -> list[distlock.Semaphore]:
    permits = [distlock.semaphore(name, limit, ttl=30, purpose="permit") for _ in range(count)]
    for permit in permits:
        assert permit.acquire(wait=0)
    return permits


def test_list_shows_a_semaphore_as_one_row_with_its_holders(redis_backend: str):
    hold("reports:daily")
    hold_permits("exports", 3, 2)
    lines = distlock_command("list", "-v", "0").splitlines()
    assert lines[0].startswith("NAME ") and lines[1].startswith("reports:daily ")
    assert lines[2] == ""
    assert lines[3].split()[:3] == ["SEMAPHORE", "HELD", "WAITING"]
    row = lines[4].split()
    assert row[:3] == ["exports", "2/3", "0"] and lines[4].count(f":{os.getpid()} (") == 2
    assert len(lines) == 5
    listed = json.loads(distlock_command("list", "--json"))
    permits = [entry for entry in listed if "semaphore" in entry]
    assert [entry["name"] for entry in permits] == ["exports", "exports"]
    assert permits[0]["semaphore"] == {"limit": 3, "waiting": 0}
    assert distlock_command("list", "--prefix", "exp", "-v", "0").startswith("SEMAPHORE")


def test_info_and_release_free_one_permit_by_token(redis_backend: str):
    permits = hold_permits("exports", 3, 2)
    text = distlock_command("info", "exports")
    assert "permits:        2 of 3 held, 0 waiting" in text
    assert all(f"token {permit.token}:" in text for permit in permits)
    assert json.loads(distlock_command("info", "exports", "--json"))["limit"] == 3
    with pytest.raises(CommandError, match="pass --token") as raised:
        distlock_command("release", "exports", "--yes")
    assert raised.value.returncode == 1
    with pytest.raises(CommandError, match="No permit"):
        distlock_command("release", "exports", "--yes", "--token", "f" * 32)
    out = distlock_command("release", "exports", "--yes", "--token", permits[0].token)
    assert out.startswith("Freed the permit of the semaphore 'exports'")
    assert not permits[0].owned() and permits[1].owned()


class NonFair(LockedCommandMixin, BaseCommand):
    """Says the token its run holds the lock with."""

    lock_name = "non-fair"
    lock_fair = False

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(distlock.locks["default"].info("non-fair").token)


def test_lock_fair_false_holds_a_non_fair_lock(redis_backend: str) -> None:
    out, _ = run(NonFair())
    assert out.startswith("!")  # the mark of a non-fair token (docs/protocol.md)
