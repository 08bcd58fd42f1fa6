"""Issue 40: a locked command's ``handle()`` reaches the Lock it runs under as ``self.lock``
(its fencing token, ``lease_left()``, ``extend()``), None outside ``handle()`` and with
``--no-lock``; ``lock_fence`` reaches the Lock and must be True or False."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from distlock.management import LockedCommandMixin
from tests.support.lock_helpers import seen_from_inside

pytestmark = pytest.mark.django_db(databases=[])


class Reach(LockedCommandMixin, BaseCommand):
    lock_name = "reach-command"
    lock_ttl = 5
    lock_fence = True
    seen: dict[str, Any] | None = None

    def handle(self, *args: Any, **options: Any) -> None:
        type(self).seen = (
            None if self.lock is None else seen_from_inside(self.lock, "reach-command")
        )


Reach.__module__ = "tests.commands.management.commands.reach_command"


def test_handle_reaches_its_lock_as_self_lock(redis_backend: str) -> None:
    command = Reach()
    call_command(command)
    seen = Reach.seen
    assert seen is not None and seen["token"] == seen["server_token"] and seen["fence"] is True
    assert 4 < seen["lease_left"] <= 5
    assert command.lock is None, "outside handle() there is no lock"
    call_command(Reach(), no_lock=True)
    assert Reach.seen is None


def test_lock_fence_must_be_true_or_false(redis_backend: str) -> None:
    class Bad(Reach):
        lock_fence = "yes"  # type: ignore[assignment]

    with pytest.raises(CommandError, match="lock_fence must be True or False"):
        call_command(Bad())
