"""Fixtures several modules of tests/core share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.databases import DatabaseServer
from devkit.redis_server import RedisServer
from devkit.shop.load import Shop, serve_shop, shop_locks
from devkit.shop.stops import stop_file

AT_ONCE = 4  # fenced trials in flight together: each needs two gunicorn workers


# The fenced pay view's shop, for test_fence_processes and test_fence_adversary_processes
# (test_transactions_databases and test_transactions_surfaces serve shops of their own).
@pytest.fixture
def shop(real_database: DatabaseServer, redis_server: RedisServer, settings: Any) -> Iterator[Shop]:
    redis_server.flushall()
    settings.DISTLOCK = shop_locks(redis_server.url)  # to see the shop's locks
    with serve_shop(real_database, redis_server.url, workers=AT_ONCE * 2) as served:
        yield served
    shutil.rmtree(stop_file(served.database, 0).parent, ignore_errors=True)
