"""Issue 39, the fourth adversary: the fixes of the third round attacked again. Each test
says what it expects and what was observed; each FAILS on the code it was written against
(main at c74ddd7).

SQLite and threads in-process where the database does not matter; PostgreSQL and MariaDB
(devkit/shop/adversary4.py) where it does.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

import distlock
from devkit.databases import DatabaseServer
from devkit.redis_server import RedisServer
from devkit.shop.load import scenario_report
from tests.support.lock_helpers import free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


def _try_once(name: str) -> bool:
    """Try ``name`` once (wait=0) and let it go; return whether it was granted."""
    lk = distlock.lock(name, ttl=5, wait=0)
    got = lk.acquire()
    if got:
        lk.release()
    return got


def test_a_pool_thread_on_a_connection_of_its_own_never_takes_back_the_requests_release() -> None:
    """A request's transaction (ATOMIC_REQUESTS) charges an order under its lock: the release
    waits for the request's COMMIT. The request then calls an async service (async_to_sync)
    that offloads blocking ORM work to a pool thread (sync_to_async(thread_sensitive=False)),
    which charges the same order again under the same lock.

    Expected: the pool thread waits for the request's COMMIT (acquire(wait=0) refused): its
    queries run on a connection of its own (Django's connections are per thread), outside
    the request's transaction, so the request's charge, not committed yet, is invisible to
    it, as it is to another process.
    Observed: the pool thread runs in a copy of the request's context, which names the
    request's connection and open transaction, so distlock counts it as inside that
    transaction: it takes the release back at once, and reads the order unpaid (double
    execution; devkit/shop/adversary4.py measures it on PostgreSQL and MariaDB)."""
    name = "adv4:pool-own-connection"
    got: list[bool] = []

    async def service() -> None:
        got.append(await sync_to_async(_try_once, thread_sensitive=False)(name))

    with transaction.atomic():  # the request's transaction
        with distlock.lock(name, ttl=5):
            pass  # the request's charge; the release waits for the COMMIT
        async_to_sync(service)()
        assert is_held(name)
    assert got == [False], "a pool thread took back the release of the request's transaction"
    assert free_within(name)


def test_a_pool_thread_after_the_request_on_a_real_database_never_charges_twice(
    real_database: DatabaseServer, redis_server: RedisServer
) -> None:
    """The first test's shape on PostgreSQL and MariaDB (devkit/shop/adversary4.py): the
    request charges an order, then its async service charges it again in a pool thread
    under the same lock (wait=1). Expected: the pool thread waits for the request's COMMIT
    (which waits for it: refused after its wait), 0 orders charged twice. Observed on
    c74ddd7: it took the release back and, on its own connection, read the order unpaid:
    10 of 10 orders charged twice on PostgreSQL, 10 of 10 on MariaDB."""
    redis_server.flushall()
    report = scenario_report(real_database, redis_server.url, "devkit.shop.adversary4")
    assert report["pool_after_request"] == {"twice": 0, "results": ["charged", "waited"]}
