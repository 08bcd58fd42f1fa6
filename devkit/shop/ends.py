"""How a transaction ends, on a real database, run in a process of its own (``python -m
devkit.shop.ends``, with DJANGO_SETTINGS_MODULE devkit.shop.settings,
DISTLOCK_TEST_DATABASES and DISTLOCK_TEST_URL set): for tests/core/test_transactions_databases.py.

Each scenario takes and releases a lock inside ``transaction.atomic()`` and ends the
transaction one way; it reports whether the lock was held while it had to be (another thread
could not take it) and free within 100 ms of the end. Prints one line of JSON, scenario ->
``{"held": bool, "freed": bool}``:

* ``killed``: the server kills the connection (``pg_terminate_backend``, MariaDB's ``KILL``),
  the next query fails and the block rolls back;
* ``closed``: ``connection.close()`` inside the block, before the release;
* ``hook-fails``: a non-robust ``on_commit`` hook raises at COMMIT, its exception kept;
* ``batch``: one savepoint per item, the repeat of an order rolled back: held until COMMIT.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable

import django

django.setup()

from django.db import DatabaseError, connection, transaction  # noqa: E402

import distlock  # noqa: E402
from devkit.shop.models import Order  # noqa: E402

kept: list[BaseException] = []


class Declined(Exception):
    pass


def free_for_others(name: str) -> bool:
    """Return True if another thread takes ``name`` at once (then lets it go)."""
    got: list[bool] = []

    def take() -> None:
        lk = distlock.lock(name, ttl=5, wait=0)
        got.append(lk.acquire())
        if got[-1]:
            lk.release()

    thread = threading.Thread(target=take)
    thread.start()
    thread.join(10)
    return got == [True]


def free_within(name: str, seconds: float = 0.1) -> bool:
    deadline = time.monotonic() + seconds
    while distlock.locks["default"].info(name) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def kill_own_connection() -> None:
    with connection.cursor() as cursor:
        own = "SELECT pg_backend_pid()" if connection.vendor == "postgresql" else None
        cursor.execute(own or "SELECT CONNECTION_ID()")
        ident = int(cursor.fetchone()[0])
    killer = connection.get_new_connection(connection.get_connection_params())
    try:
        cursor = killer.cursor()
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_terminate_backend(%s)", [ident])
        else:
            cursor.execute(f"KILL {ident}")
    finally:
        killer.close()


def killed(name: str) -> bool:
    with contextlib.suppress(DatabaseError), transaction.atomic():
        with distlock.lock(name, ttl=30):
            Order.objects.count()
        held = not free_for_others(name)
        kill_own_connection()
        time.sleep(0.2)
        Order.objects.count()  # fails: the connection is gone
    connection.close()
    return held


def closed(name: str) -> bool:
    with transaction.atomic():
        with distlock.lock(name, ttl=30):
            Order.objects.count()
            connection.close()  # before the release
        held = not free_for_others(name)
    return held


def hook_fails(name: str) -> bool:
    def fail() -> None:
        raise RuntimeError("the hook failed")

    try:
        with transaction.atomic():
            transaction.on_commit(fail)
            with distlock.lock(name, ttl=30):
                Order.objects.create()
            held = not free_for_others(name)
    except RuntimeError as exc:
        kept.append(exc)  # its traceback keeps Django's frames alive
    return held


def batch(name: str) -> bool:
    with transaction.atomic():
        for declined in (False, True):
            try:
                with transaction.atomic(), distlock.lock(name, ttl=30):
                    Order.objects.create()
                    if declined:
                        raise Declined
            except Declined:
                pass
        held = not free_for_others(name)
    return held


SCENARIOS: dict[str, Callable[[str], bool]] = {
    "killed": killed,
    "closed": closed,
    "hook-fails": hook_fails,
    "batch": batch,
}


def main() -> None:
    report = {}
    for label, scenario in SCENARIOS.items():
        held = scenario(f"ends:{label}")
        report[label] = {"held": held, "freed": free_within(f"ends:{label}")}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
