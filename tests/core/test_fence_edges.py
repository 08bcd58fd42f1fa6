"""Issue 40: the edges of ``fence=True`` in one process, on SQLite (the claims themselves, on
every database: tests/core/test_fence_claims.py): bad arguments, kinds that cannot be fenced,
a transaction managed by hand, a database without the fence table, and the Fence rows."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

import distlock
from distlock.claims import claim_first, digest
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


def test_a_rolled_back_transaction_takes_its_claim_along() -> None:
    with distlock.lock("rolled-back", ttl=10, fence=True) as lk:
        with pytest.raises(RuntimeError), transaction.atomic():
            Fence.objects.count()
            raise RuntimeError("roll back")
        Fence.objects.count()  # a transaction of its own, which claims again
    row = Fence.objects.get(name="rolled-back")
    assert (row.token, row.claims) == (lk.fencing_token, 1), "the rolled-back claim stayed"


def test_a_token_from_a_clock_set_back_is_refused_until_the_row_goes() -> None:
    """The lock server's clock went back (after a restart that lost its data): its tokens
    are smaller than the one stored. Every holder is refused, saying its lease has not
    ended; deleting the name's row lets holders in again."""
    Fence.objects.create(digest=digest("default", "clock"), name="clock", token=2**62)
    with (
        distlock.lock("clock", ttl=10, fence=True),
        pytest.raises(distlock.FencedUpdateRejected, match="clock was set back") as refused,
    ):
        Fence.objects.count()
    assert refused.value.newest == 2**62 and refused.value.name == "clock"
    Fence.objects.filter(name="clock").delete()
    with distlock.lock("clock", ttl=10, fence=True) as lk:
        Fence.objects.count()
    assert Fence.objects.get(name="clock").token == lk.fencing_token


@pytest.mark.django_db(transaction=True, databases=["default", "fencing"])
def test_each_database_the_holder_uses_claims_on_its_own() -> None:
    with distlock.lock("two-databases", ttl=10, fence=True) as lk:
        with transaction.atomic(using="default"):
            Fence.objects.using("default").count()
        with transaction.atomic(using="fencing"):
            Fence.objects.using("fencing").count()
    for alias in ("default", "fencing"):
        row = Fence.objects.using(alias).get(name="two-databases")
        assert (row.token, row.claims) == (lk.fencing_token, 1), alias


class NoFenceOnFencing:
    """A router that keeps distlock's Fence off the "fencing" database."""

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: object
    ) -> bool | None:
        if app_label == "distlock" and model_name == "fence":
            return db != "fencing"
        return None


@pytest.mark.django_db(transaction=True, databases=["default", "fencing"])
def test_a_router_keeps_the_claims_off_a_database(settings) -> None:
    settings.DATABASE_ROUTERS = [NoFenceOnFencing()]
    with distlock.lock("routed", ttl=10, fence=True), transaction.atomic(using="fencing"):
        Fence.objects.using("fencing").count()
    assert not Fence.objects.using("fencing").filter(name="routed").exists()


@pytest.mark.django_db  # inside the test's own transaction, as in Django's TestCase
def test_a_users_capture_of_on_commit_callbacks_sees_only_the_users_own(
    django_capture_on_commit_callbacks,
) -> None:
    """The claim is noted by distlock, not registered with Django: a fenced block's
    on_commit callbacks are the user's own (the contract's "Locks and database
    transactions")."""

    def mine() -> None:
        return None

    with (
        distlock.lock("captured", ttl=10, fence=True) as lk,
        django_capture_on_commit_callbacks() as callbacks,
        transaction.atomic(),
    ):
        Fence.objects.count()  # claims
        transaction.on_commit(mine)
        assert [func for _, func, _ in connection.run_on_commit] == [mine]
        Fence.objects.count()  # claimed already
    assert callbacks == [mine]
    row = Fence.objects.get(name="captured")
    assert (row.token, row.claims) == (lk.fencing_token, 1)


def test_a_claim_in_a_rolled_back_savepoint_is_made_again() -> None:
    """A claim made in a savepoint that rolls back is gone with it: the next statement
    claims again. A claim made outside every savepoint lasts for the transaction."""
    with distlock.lock("savepoints", ttl=10, fence=True) as lk, transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            Fence.objects.count()  # claims inside the savepoint
            raise RuntimeError("roll the savepoint back, and its claim with it")
        with transaction.atomic():
            Fence.objects.count()  # claims again, or the row would not be there
        Fence.objects.count()  # outside every savepoint
        with CaptureQueriesContext(connection) as statements:
            with transaction.atomic():
                Fence.objects.count()
            Fence.objects.count()
    row = Fence.objects.get(name="savepoints")
    assert row.token == lk.fencing_token
    claims = [query for query in statements if "INSERT" in query["sql"]]
    assert claims == [], "a claim made outside every savepoint was made again"


def test_the_fence_wrapper_is_on_the_connections_only_while_a_fenced_lock_is_held() -> None:
    """No statement pays for the fence while no fenced lock is held in the process; while one
    is, every connection carries the wrapper, also one another thread opened before, where
    the holder's code may run (sync_to_async runs it in a copy of its context)."""

    def open_connection() -> Any:
        Fence.objects.count()
        return connections["default"]

    def claims_there() -> None:
        with transaction.atomic():
            Fence.objects.count()

    def close() -> None:
        connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        try:
            other = pool.submit(open_connection).result()
            Fence.objects.count()
            assert claim_first not in connection.execute_wrappers
            assert claim_first not in other.execute_wrappers
            with distlock.lock("wrapped", ttl=10, fence=True) as lk:
                assert claim_first in connection.execute_wrappers
                assert claim_first in other.execute_wrappers
                pool.submit(contextvars.copy_context().run, claims_there).result()
                row = pool.submit(Fence.objects.get, name="wrapped").result()  # unfenced
                assert (row.token, row.claims) == (lk.fencing_token, 1)
            Fence.objects.count()  # each connection takes it off at its next statement
            pool.submit(open_connection).result()
            assert claim_first not in connection.execute_wrappers
            assert claim_first not in other.execute_wrappers
        finally:
            pool.submit(close).result()


@pytest.mark.parametrize("savepoint", [True, False])
def test_each_transaction_managed_by_hand_claims_in_its_atomic_blocks(savepoint: bool) -> None:
    """An atomic block inside a transaction managed by hand, then commit() by hand: the next
    transaction's block claims again (its commit() is no end a claim survives)."""
    with distlock.lock("by-hand:atomic", ttl=10, fence=True) as lk:
        connection.set_autocommit(False)
        try:
            for _ in range(2):
                with transaction.atomic(savepoint=savepoint):
                    Fence.objects.count()
                connection.commit()
        finally:
            connection.rollback()
            connection.set_autocommit(True)
    row = Fence.objects.get(name="by-hand:atomic")
    assert (row.token, row.claims) == (lk.fencing_token, 2)
