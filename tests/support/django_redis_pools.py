"""Drop django-redis's process-wide connection pools whenever a test changes CACHES.

django-redis keeps one pool per Redis URL for the whole process (ConnectionFactory._pools,
keyed by the URL alone, not by the cache's OPTIONS). The tests' Redis servers are
session-wide, so a test that sets a small pool (CONNECTION_POOL_KWARGS max_connections)
left that pool to every later test on the same URL, and a later test's own pool options were
ignored whenever an earlier test had built the URL's pool first: tests failed with
MaxConnectionsError or passed on a pool they did not ask for, depending on the order.
Django rebuilds its cache handlers on a CACHES change (its own setting_changed receiver);
this makes the caches built then build their pools afresh, from their own OPTIONS.
"""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django_redis.pool import ConnectionFactory


def drop_pools_on_caches_change(*, setting: str, **kwargs: Any) -> None:
    if setting != "CACHES":
        return
    # The test may look inside django-redis (distlock may not): it has no public way to
    # forget a pool. Every subclass shares this one dict (it is only ever mutated).
    pools = ConnectionFactory._pools
    while pools:
        _, pool = pools.popitem()
        pool.disconnect()


def connect() -> None:
    setting_changed.connect(drop_pools_on_caches_change, dispatch_uid=__name__)
