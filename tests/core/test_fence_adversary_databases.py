"""Issue 40 adversary: ways a stale holder reaches a real database past the fence
(devkit/shop/fence_adversary.py). Each failed on the code it attacked."""

from __future__ import annotations

from typing import Any

from devkit.databases import DatabaseServer
from devkit.redis_server import RedisServer
from devkit.shop.load import serve_shop, shop_env
from tests.core.test_fence_claims import claims_report

_REPORTS: dict[str, dict[str, Any]] = {}


def attacks(database: DatabaseServer, redis_server: RedisServer) -> dict[str, Any]:
    """Every attack's outcome on ``database`` (run once per server, in one process)."""
    if database.vendor not in _REPORTS:
        _REPORTS[database.vendor] = run_attacks(database, redis_server)
    return _REPORTS[database.vendor]


def run_attacks(database: DatabaseServer, redis_server: RedisServer) -> dict[str, Any]:
    redis_server.flushall()
    with serve_shop(database, redis_server.url, workers=0) as shop:
        env = shop_env(database, shop.database, redis_server.url)
        return claims_report(env, "devkit.shop.fence_adversary")


def test_mariadb_a_stale_holder_cannot_charge_through_a_stored_procedure_or_a_compound(
    mariadb_server: DatabaseServer, redis_server: RedisServer
) -> None:
    """Django's ``cursor.callproc()`` skips ``execute_wrappers``: the documented remedy
    (docs/fencing-and-limits.md) claims by hand first, ``distlock.fencing.claim(lock)`` in
    ``atomic()``. A MariaDB compound statement (``BEGIN NOT ATOMIC ... END``, in autocommit)
    passed as a transaction-control statement and is now claimed. Expected: the stale
    holder refused in both, nothing charged."""
    report = attacks(mariadb_server, redis_server)
    assert report["vendor"] == "mysql"
    assert report["callproc"] == {"verdict": "refused", "charged": 0}, report
    assert report["compound"] == {"verdict": "refused", "charged": 0}, report


def test_mariadb_a_claim_outlives_no_implicit_commit(
    mariadb_server: DatabaseServer, redis_server: RedisServer
) -> None:
    """MariaDB commits implicitly before DDL (here TRUNCATE of a scratch table) inside
    ``atomic()``: the claim's transaction (and its row lock) end, the fence's marker stays,
    so after a pause a newer holder claims and commits and the stale holder's charge in the
    same atomic block is accepted unclaimed. Expected: refused, nothing charged."""
    report = attacks(mariadb_server, redis_server)["implicit_commit"]
    assert report["newer"] == "claimed", report  # the row lock had gone with the commit
    assert (report["verdict"], report["charged"]) == ("refused", 0), report


def test_postgresql_a_fenced_holder_can_vacuum(
    postgres_server: DatabaseServer, redis_server: RedisServer
) -> None:
    """A statement PostgreSQL runs only outside a transaction (VACUUM, CREATE INDEX
    CONCURRENTLY) in autocommit under a fenced lock: the fence wrapped it in atomic() with
    its claim, and PostgreSQL refused it. Expected: it runs (let pass unclaimed, as
    docs/fencing-and-limits.md says)."""
    assert attacks(postgres_server, redis_server)["vacuum"] == "ran"


def test_postgresql_a_stale_holder_cannot_charge_through_copy(
    postgres_server: DatabaseServer, redis_server: RedisServer
) -> None:
    """psycopg's ``cursor.copy()`` (COPY ... FROM STDIN, the bulk load of import commands)
    reaches the driver's cursor past Django's ``execute_wrappers``: the documented remedy
    claims by hand first (``distlock.fencing.claim(lock)`` in the same ``atomic()``).
    Expected: the stale holder refused, nothing charged."""
    report = attacks(postgres_server, redis_server)["copy"]
    assert report == {"verdict": "refused", "charged": 0}, report


def test_postgresql_raw_sql_that_begins_its_own_transaction_is_fenced(
    postgres_server: DatabaseServer, redis_server: RedisServer
) -> None:
    """A raw statement string that starts with BEGIN (``BEGIN; INSERT ...; COMMIT``, run in
    autocommit) passes the fence's wrapper as a transaction-control statement: a stale
    holder's insert is committed without a claim. Expected: refused, nothing charged."""
    report = attacks(postgres_server, redis_server)["begun"]
    assert report == {"verdict": "refused", "charged": 0}, report


def test_a_fenced_holder_reconnects(
    real_database: DatabaseServer, redis_server: RedisServer
) -> None:
    """The newest holder's connection closed and opened again under its fenced lock (the
    statements Django sets a new connection up with pass the fence's wrapper). Expected:
    its work runs, in autocommit and in atomic()."""
    report = attacks(real_database, redis_server)["reconnect"]
    assert report == {"autocommit": "ran", "atomic": "ran"}, report
