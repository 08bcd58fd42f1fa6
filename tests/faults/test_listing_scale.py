"""50,000 held locks, listed by ``held()``'s consistent walk (iter_held) and by
``manage.py distlock list`` while other locks come and go: each lock once, in under 3 s.

Marked slow (it holds 50,000 locks); .ci/run runs it on its own as well, so CI measures the
figure too. tests/test_held_walk.py is the short version (1,200 locks, every backend).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command

from distlock.handler import locks
from tests.lock_helpers import churning, hold_many, release_many

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.slow]
HELD = 50_000
LIMIT = 3.0  # seconds, for the walk and for the command


def test_fifty_thousand_held_locks_list_once_each_in_under_3_s(redis_backend: str,
                                                               record) -> None:
    names = [f"held:{number}" for number in range(HELD)]
    tokens = hold_many(names, ttl=300)
    try:
        with churning(500) as churned:
            started = time.monotonic()
            walked = [info.name for info in locks["default"].iter_held()]
            walk_seconds = time.monotonic() - started
            out = StringIO()
            started = time.monotonic()
            call_command("distlock", "list", "--json", stdout=out)
            command_seconds = time.monotonic() - started
    finally:
        release_many(tokens)
    listed = [entry["name"] for entry in json.loads(out.getvalue())]
    for found in (walked, listed):
        assert [name for name, times in Counter(found).items() if times > 1] == []
        assert set(names) <= set(found)
        assert all(name.startswith(("held:", "churn:")) for name in found)
    assert churned["locks"] > 0
    record("50,000 held locks listed", f"iter_held {walk_seconds:.2f} s, manage.py distlock "
           f"list --json {command_seconds:.2f} s, each lock once, {churned['locks']} other "
           "locks taken and released meanwhile", walk_seconds=round(walk_seconds, 2),
           command_seconds=round(command_seconds, 2), held=HELD)
    assert walk_seconds < LIMIT and command_seconds < LIMIT
