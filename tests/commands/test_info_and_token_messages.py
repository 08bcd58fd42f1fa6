"""``manage.py distlock info`` and ``release --token`` say what is so (issue 33, item 10):
``info --json`` of a lock not held writes valid JSON, every kind labels its waiters alike,
and a token that no holder has is told apart from a holder that changed meanwhile."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import distlock
from tests.commands.test_commands import Terminal, distlock_command, hold


def test_info_json_of_a_lock_not_held_writes_null_and_exits_1(redis_backend: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match=r"^The lock 'nope' is not held") as raised:
        call_command("distlock", "info", "nope", "--json", stdout=out, stderr=err)
    assert raised.value.returncode == 1
    assert json.loads(out.getvalue()) is None
    # Without --json nothing is written to stdout: the error says it (on stderr).
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("distlock", "info", "nope", stdout=out, stderr=err)
    assert out.getvalue() == ""


def test_every_kind_labels_its_waiters_alike(redis_backend: str) -> None:
    lock = hold("reports:daily")
    reader = distlock.lock("price-list", shared=True, ttl=30)
    permit = distlock.semaphore("exports", 2, ttl=30)
    assert reader.acquire(wait=0) and permit.acquire(wait=0)
    try:
        for name in ("reports:daily", "price-list", "exports"):
            text = distlock_command("info", name)
            assert "\nwaiters:        0\n" in text + "\n", (name, text)
            assert "Waiters" not in text, (name, text)
    finally:
        for held in (lock, reader, permit):
            held.release()


def test_a_mistyped_token_is_not_called_a_change_of_holder(redis_backend: str) -> None:
    holder = hold("reports:daily")
    typo = holder.token[:-1] + ("0" if holder.token[-1] != "0" else "1")
    with pytest.raises(CommandError) as raised:
        distlock_command("release", "reports:daily", "--token", typo, "--yes")
    message = str(raised.value)
    assert message.startswith(f"No holder of the lock 'reports:daily' has the token {typo}:")
    assert f"held with another token ({holder.token})" in message
    assert "changed" not in message and raised.value.returncode == 1
    assert holder.owned()
    holder.release()


class ChangesHands(Terminal):
    """A terminal whose operator answers "y" after the lock changed hands."""

    def __init__(self, holder: distlock.Lock) -> None:
        super().__init__()
        self.holder = holder
        self.successor = distlock.lock(holder.name, ttl=30)

    def readline(self, *args: object) -> str:
        self.holder.release()
        assert self.successor.acquire(wait=0)
        return "y\n"


def test_a_holder_that_changed_before_the_release_is_said_so(redis_backend: str) -> None:
    holder = hold("reports:daily")
    stdin = ChangesHands(holder)
    with pytest.raises(CommandError, match="its holder changed before") as raised:
        distlock_command("release", "reports:daily", "--token", holder.token, stdin=stdin)
    assert raised.value.returncode == 1
    assert stdin.successor.owned()  # the new holder keeps it
    stdin.successor.release()
