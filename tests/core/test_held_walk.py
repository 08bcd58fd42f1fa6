"""iter_held() and ``manage.py distlock list``: one consistent walk of the held locks, on
every backend, while other locks come and go beside the ones listed."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command

import distlock
from distlock.backends.redis_ops import listing
from distlock.handler import locks
from tests.support.lock_helpers import churning, hold_many, release_many

pytestmark = pytest.mark.django_db(databases=[])
HELD = 1200


@pytest.fixture
def churn(backend_kind: str) -> Iterator[Counter[str]]:
    """Other locks taken and released while the test lists."""
    with churning() as churned:
        yield churned


def assert_each_once(listed: list[str], held: list[str]) -> None:
    repeated = [name for name, times in Counter(listed).items() if times > 1]
    assert repeated == []
    missing = set(held) - set(listed)
    assert not missing, f"{len(missing)} of {len(held)} held locks were not listed"
    assert all(name in held or name.startswith("churn:") for name in listed)


def test_every_lock_held_throughout_is_walked_exactly_once(
    backend_kind: str, churn: Counter[str]
) -> None:
    names = [f"held:{number}" for number in range(HELD)]
    tokens = hold_many(names, ttl=60)
    try:
        for _ in range(3):
            infos = list(locks["default"].iter_held())
            assert_each_once([info.name for info in infos], names)
            by_name = {info.name: info for info in infos}
            assert all(by_name[name].token == tokens[name] for name in names)
        some = sorted(info.name for info in locks["default"].iter_held("held:11"))
        assert some == sorted(name for name in names if name.startswith("held:11"))
    finally:
        release_many(tokens)
    assert churn["locks"] > 0  # the other locks did come and go meanwhile


def test_the_list_command_shows_each_held_lock_once(backend_kind: str, churn: Counter[str]) -> None:
    names = [f"held:{number}" for number in range(HELD)]
    tokens = hold_many(names, ttl=60)
    try:
        out = StringIO()
        call_command("distlock", "list", "--json", stdout=out)
        listed = [entry["name"] for entry in json.loads(out.getvalue())]
        assert_each_once(listed, names)
        assert [name for name in listed if name.startswith("held:")] == sorted(names)
    finally:
        release_many(tokens)


@pytest.mark.parametrize("prefix", ["a*", "a?", "a[1]", "a\\"])
def test_a_prefix_with_glob_characters_is_literal(redis_backend: str, prefix: str) -> None:
    names = [prefix + "x", prefix, "ab" + prefix, "a"]
    held = [distlock.lock(name, ttl=30) for name in names]
    for lk in held:
        lk.acquire()
    try:
        listed = sorted(info.name for info in locks["default"].iter_held(prefix))
        assert listed == sorted([prefix + "x", prefix])
    finally:
        for lk in held:
            lk.release()


def test_an_index_that_shrinks_during_the_walk_yields_no_lock_twice(
    redis_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two buckets, far above the size Redis keeps compact (128 entries): ZSCAN pages through
    # their hash tables. When a table shrinks between two pages (most locks released), ZSCAN
    # returns some names again; the walk must not.
    monkeypatch.setattr("distlock.keys.BUCKETS", 2)
    monkeypatch.setattr(listing, "SCAN_COUNT", 20)
    locks.reset()
    names = [f"held:{number}" for number in range(600)]
    tokens = hold_many(names, ttl=60)
    try:
        for read_first in (100, 200, 300, 400, 500):
            extra = hold_many([f"extra:{number}" for number in range(8000)], ttl=60)
            walk = locks["default"].iter_held("held:")
            listed = [next(walk).name for _ in range(read_first)]
            release_many(extra)  # the tables shrink to fit the 600 left
            listed += [info.name for info in walk]
            assert_each_once(listed, names)
    finally:
        release_many(tokens)
    locks.reset()


def test_a_bad_prefix_is_refused_before_any_call(backend_kind: str) -> None:
    with pytest.raises(TypeError, match="prefix must be a str"):
        locks["default"].iter_held(5)  # type: ignore[arg-type]
