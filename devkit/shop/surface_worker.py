"""A worker process of tests/core/test_transactions_surfaces.py: ``python -m
devkit.shop.surface_worker SURFACE ORDERS`` (DJANGO_SETTINGS_MODULE
devkit.shop.settings, the database in DISTLOCK_TEST_DATABASES, the locks on
DISTLOCK_TEST_URL).

It connects to the database and to Redis, says ``ready``, waits for a line on stdin (so that
the workers start together), then charges orders 1 to ORDERS in turn, each inside
``transaction.atomic()``, through one surface of devkit/shop/surfaces.py. An attempt the
surface skipped (a duplicate, while another worker held the lock) is tried again, in a new
transaction, until it runs: as a caller does whose run was skipped. Without that, a skipped
worker never read the order again, and a lock handed on before COMMIT would show only when a
duplicate happened to arrive in the few milliseconds between the release and the COMMIT.

Last it prints one line of JSON: its pid, the count of each result, how many orders found the
lock held (the ``lock_contended`` signal, or a skipped attempt), the skipped attempts, and how
many charges ran outside its transaction.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import django

django.setup()

from django.db import connection  # noqa: E402

import distlock  # noqa: E402
from devkit.shop import surfaces  # noqa: E402
from distlock.signals import lock_contended  # noqa: E402

RETRY_PAUSE = 0.002  # seconds between a skipped attempt and the next
RETRY_FOR = 10.0  # seconds an order is retried for, as long as the other surfaces wait
_contended: list[str] = []


def _note_contended(sender: Any, name: str, **kwargs: Any) -> None:
    _contended.append(name)


def attempts(run: Callable[[int], str], order_id: int) -> tuple[str, int]:
    """Charge ``order_id`` through ``run``, each attempt in a transaction of its own, until an
    attempt is not skipped (or RETRY_FOR has passed); return its result and the skips."""
    deadline = time.monotonic() + RETRY_FOR
    skips = 0
    while True:
        with surfaces.worker_transaction():
            result = run(order_id)
        if result != surfaces.SKIPPED or time.monotonic() > deadline:
            return result, skips
        skips += 1
        time.sleep(RETRY_PAUSE)


def main(surface: str, orders: int) -> None:
    run = surfaces.SURFACES[surface]
    lock_contended.connect(_note_contended)
    connection.ensure_connection()
    with distlock.lock(f"warm-up:{os.getpid()}", ttl=5):  # connect to Redis
        pass
    print("ready", flush=True)
    sys.stdin.readline()
    results: Counter[str] = Counter()
    found_held = skipped = 0
    for order_id in range(1, orders + 1):
        before = len(_contended)
        result, skips = attempts(run, order_id)
        results[result] += 1
        skipped += skips
        found_held += len(_contended) > before or skips > 0
    print(
        json.dumps(
            {
                "pid": os.getpid(),
                "results": results,
                "found_held": found_held,
                "skipped": skipped,
                "contended_signals": len(_contended),
                "charged_outside": len(surfaces.charged_outside),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
