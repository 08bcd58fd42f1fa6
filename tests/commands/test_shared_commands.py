"""``manage.py distlock`` and shared locks: one row with its holders in ``list``, each holder
in ``info``, one hold released by token."""

from __future__ import annotations

import json
import os

import pytest
from django.core.management.base import CommandError

import distlock
from tests.commands.test_commands import distlock_command, hold

pytestmark = pytest.mark.django_db(databases=[])


def hold_shared(name: str, count: int) -> list[distlock.Lock]:
    taken = [distlock.lock(name, shared=True, ttl=30, purpose="reader") for _ in range(count)]
    for lk in taken:
        assert lk.acquire(wait=0)
    return taken


def test_list_shows_a_shared_lock_as_one_row_with_its_holders(redis_backend: str) -> None:
    hold("reports:daily")
    hold_shared("price-list", 3)
    lines = distlock_command("list", "-v", "0").splitlines()
    assert lines[0].startswith("NAME ") and lines[1].startswith("reports:daily ")
    assert lines[2] == ""
    assert lines[3].split()[:4] == ["SHARED", "LOCK", "HOLDERS", "WAITERS"]
    row = lines[4].split()
    assert row[:3] == ["price-list", "3", "0"] and lines[4].count(f":{os.getpid()} (") == 3
    assert len(lines) == 5
    listed = json.loads(distlock_command("list", "--json"))
    readers = [entry for entry in listed if entry["shared"]]
    assert [entry["name"] for entry in readers] == ["price-list"] * 3
    assert [e["name"] for e in listed if not e["shared"]] == ["reports:daily"]
    assert distlock_command("list", "--prefix", "price", "-v", "0").startswith("SHARED")


def test_info_lists_each_holder_and_release_frees_one_by_token(redis_backend: str) -> None:
    readers = hold_shared("price-list", 2)
    text = distlock_command("info", "price-list")
    assert "held shared by: 2" in text
    assert all(f"token {lk.token}:" in text for lk in readers)
    shown = json.loads(distlock_command("info", "price-list", "--json"))
    assert shown["shared"] is True and shown["waiting"] == []
    assert len(shown["holders"]) == 2
    with pytest.raises(CommandError, match="pass --token") as raised:
        distlock_command("release", "price-list", "--yes")
    assert raised.value.returncode == 1
    with pytest.raises(CommandError, match="No shared hold"):
        distlock_command("release", "price-list", "--yes", "--token", "~" + "f" * 32)
    out = distlock_command("release", "price-list", "--yes", "--token", readers[0].token or "")
    assert out.startswith("Released the shared hold of 'price-list'")
    assert not readers[0].owned() and readers[1].owned()
