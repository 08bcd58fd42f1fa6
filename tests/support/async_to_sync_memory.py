"""Memory of an async lock reached through ``async_to_sync`` from sync code, run in a process of
its own (``python -m tests.support.async_to_sync_memory CALLS``, with DJANGO_SETTINGS_MODULE
tests.support.env_settings and the DISTLOCK_TEST_* variables set): for
tests/core/test_transactions_holder.py (issue 39). Each call runs on an event loop of its own
(no loop is running in the caller), as in a WSGI view, a command or a Celery task. Prints one
line of JSON: the resident set (KB) and the number of objects the collector tracks after a
warm-up and after CALLS calls, half of them in a transaction.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import django

django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from django.db import transaction  # noqa: E402

import distlock  # noqa: E402

WARM_UP = 300


async def locked() -> None:
    async with distlock.lock("a2s:memory", ttl=5):
        pass


def call(times: int) -> None:
    for index in range(times):
        if index % 2:
            with transaction.atomic():
                async_to_sync(locked)()
        else:
            async_to_sync(locked)()


def measure() -> dict[str, int]:
    gc.collect()
    with open(f"/proc/{os.getpid()}/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    rss_kb = resident_pages * os.sysconf("SC_PAGE_SIZE") // 1024
    return {"rss_kb": rss_kb, "objects": len(gc.get_objects())}


def main() -> None:
    calls = int(sys.argv[1])
    call(WARM_UP)
    before = measure()
    call(calls)
    after = measure()
    print(json.dumps({"before": before, "after": after}), flush=True)


if __name__ == "__main__":
    main()
