"""50,000 held locks, listed by ``held()``'s consistent walk (iter_held) and by
``manage.py distlock list`` while other locks come and go: each lock once, none missing.

How long the listing takes is measured by the benchmarks (``benchmarks/listing.py``, target
in benchmarks/targets.py), not asserted here: a loaded machine would fail a time limit that
says nothing about the code. Marked slow (it holds 50,000 locks).
tests/core/test_held_walk.py is the short version (1,200 locks, every backend).
"""

from __future__ import annotations

import json
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command

from distlock.handler import locks
from tests.support.lock_helpers import churning, hold_many, release_many

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.slow]
HELD = 50_000


def test_fifty_thousand_held_locks_list_once_each_while_others_churn(
    redis_backend: str, record
) -> None:
    names = [f"held:{number}" for number in range(HELD)]
    tokens = hold_many(names, ttl=300)
    try:
        with churning(500) as churned:
            walked = [info.name for info in locks["default"].iter_held()]
            out = StringIO()
            call_command("distlock", "list", "--json", stdout=out)
    finally:
        release_many(tokens)
    listed = [entry["name"] for entry in json.loads(out.getvalue())]
    for found in (walked, listed):
        assert [name for name, times in Counter(found).items() if times > 1] == []
        assert set(names) <= set(found)
        assert all(name.startswith(("held:", "churn:")) for name in found)
    assert churned["locks"] > 0
    record(
        "50,000 held locks listed",
        "iter_held and manage.py distlock list --json each "
        f"listed every held lock once while {churned['locks']} other locks were taken and "
        "released",
        held=HELD,
        churned=churned["locks"],
    )
