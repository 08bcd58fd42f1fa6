"""Issue 40: the fence's claim (``fence=True``, distlock/claims.py) on SQLite, PostgreSQL and
MariaDB, step by step in one process (devkit/shop/fence_claims.py): the first claim is
accepted and stored, the same token again is accepted in each later transaction, an older
holder's transaction (atomic, autocommit, a read alone) is refused and rolled back, a
savepoint that rolls back takes its claim along and the next statement claims again, and
code holding no fenced lock claims nothing."""

from __future__ import annotations

import json
import sys
from typing import Any

from devkit.databases import DatabaseServer
from devkit.processes import child_env, distlock_variables, run_process
from devkit.redis_server import RedisServer
from devkit.shop.load import SETTINGS, serve_shop, shop_env


def claims_report(env: dict[str, str], module: str = "devkit.shop.fence_claims") -> dict[str, Any]:
    """Run ``module`` (a script printing one line of JSON last) on the shop's settings."""
    done = run_process(
        [sys.executable, "-m", module],
        {**child_env(settings=SETTINGS), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def check(report: dict[str, Any]) -> None:
    token = report["token"]
    assert report["after_first"] == [token, 1], "the first claim stores the token"
    assert report["after_three"] == [token, 3], "the same token is claimed in each transaction"
    assert report["tokens_rise"]
    assert report["stale_atomic"] == "FencedUpdateRejected"
    assert report["stale_autocommit"] == "FencedUpdateRejected"
    assert report["stale_read"] == "FencedUpdateRejected", "refused before the work reads"
    assert report["charges"] == 2, "the stale holder's charges were rolled back"
    assert report["newest_is_newer"]
    assert report["savepoint_claims"] == 1 and report["savepoint_token"]
    assert report["unfenced_claims"]


def test_the_claim_on_sqlite(redis_server: RedisServer) -> None:
    redis_server.flushall()
    report = claims_report(distlock_variables(url=redis_server.url))
    assert report["vendor"] == "sqlite"
    check(report)


def test_the_claim_on_a_real_database(
    real_database: DatabaseServer, redis_server: RedisServer
) -> None:
    redis_server.flushall()
    with serve_shop(real_database, redis_server.url, workers=0) as shop:
        report = claims_report(shop_env(real_database, shop.database, redis_server.url))
    assert report["vendor"] == real_database.vendor
    check(report)
    assert report["async"] == {"claimed": True, "stale": "FencedUpdateRejected", "charges": 2}
