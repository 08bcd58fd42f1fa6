"""Issue 40: the edges of ``fence=True`` in one process, on SQLite (the claims themselves, on
every database: tests/core/test_fence_claims.py): bad arguments, kinds that cannot be fenced,
a transaction managed by hand, a database without the fence table, and the Fence rows."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

import distlock
from distlock.claims import digest
from distlock.models import Fence

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _redis(redis_backend: str) -> str:
    return redis_backend


def test_fence_takes_true_or_false_and_only_an_exclusive_lock() -> None:
    with pytest.raises(TypeError, match="fence must be True or False"):
        distlock.lock("x", fence=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Fence the exclusive lock"):
        distlock.lock("x", fence=True, shared=True)
    assert distlock.lock("x", fence=True).copy().fence is True
    assert distlock.semaphore("x", 2).copy().limit == 2  # no fence in its settings


def test_each_transaction_claims_and_the_row_names_the_lock() -> None:
    with distlock.lock("nightly", ttl=10, fence=True) as lk:
        for _ in range(3):
            with transaction.atomic():
                Fence.objects.count()
    row = Fence.objects.get(digest=digest("default", "nightly"))
    assert (row.name, row.token, row.claims) == ("nightly", lk.fencing_token, 3)
    assert str(row) == f"nightly: {lk.fencing_token}"


def test_a_transaction_managed_by_hand_is_refused_with_a_hint() -> None:
    with distlock.lock("by-hand", ttl=10, fence=True):
        connection.set_autocommit(False)
        try:
            with pytest.raises(distlock.LockError, match=r"transaction\.atomic\(\)"):
                Fence.objects.count()
        finally:
            connection.rollback()
            connection.set_autocommit(True)


def test_a_database_without_the_fence_table_says_to_migrate() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE distlock_fence RENAME TO distlock_fence_away")
    try:
        with (
            distlock.lock("no-table", ttl=10, fence=True),
            pytest.raises(distlock.LockError, match="migrate distlock --database default"),
        ):
            Fence.objects.filter(name="x").exists()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE distlock_fence_away RENAME TO distlock_fence")
