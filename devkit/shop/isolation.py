"""The isolation-level scenario of docs/transactions.md, run in a process of its own against a
real database (``python -m devkit.shop.isolation ORDER``, with DJANGO_SETTINGS_MODULE
devkit.shop.settings, DISTLOCK_TEST_DATABASES and SHOP_ISOLATION set).

A holder has the lock; the reader takes it in one of three ORDERs, the holder meanwhile
decrements the stock, commits, and releases (handed on after COMMIT). The reader prints
what it read under the lock and the warnings distlock gave, as JSON:

* ``query-then-lock``: ``atomic { read; lock { read } }``: the first read fixes the snapshot
  before the lock is granted;
* ``lock-in-atomic``: ``atomic { lock { read } }``, nothing read before the lock;
* ``lock-then-atomic``: ``lock { atomic { read } }``.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings

import django

django.setup()

from django.db import connections, transaction  # noqa: E402

import distlock  # noqa: E402
from devkit.shop.models import Product  # noqa: E402

NAME = "isolation"


def units() -> int:
    return Product.objects.get(pk=1).units


def holder(granted: threading.Event, go: threading.Event) -> None:
    with distlock.lock(NAME, ttl=30):
        granted.set()
        go.wait(30)
        with transaction.atomic():
            Product.objects.filter(pk=1).update(units=99)
    connections.close_all()


def reader(order: str, granted: threading.Event, go: threading.Event) -> dict[str, object]:
    granted.wait(30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", distlock.IsolationLevelWarning)
        if order == "query-then-lock":
            with transaction.atomic():
                before = units()
                go.set()
                with distlock.lock(NAME, ttl=30, wait=30):
                    read = units()
        elif order == "lock-in-atomic":
            before = None
            with transaction.atomic():
                go.set()
                with distlock.lock(NAME, ttl=30, wait=30):
                    read = units()
        else:
            before = None
            go.set()
            with distlock.lock(NAME, ttl=30, wait=30), transaction.atomic():
                read = units()
    warned = [
        str(w.message) for w in caught if issubclass(w.category, distlock.IsolationLevelWarning)
    ]
    return {"order": order, "before": before, "read": read, "warned": warned}


def main(order: str) -> None:
    Product.objects.update_or_create(pk=1, defaults={"units": 100})
    granted, go = threading.Event(), threading.Event()
    thread = threading.Thread(target=holder, args=(granted, go))
    thread.start()
    result = reader(order, granted, go)
    thread.join(30)
    result["after"] = units()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
