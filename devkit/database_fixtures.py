"""Real PostgreSQL and MariaDB servers (devkit/databases.py) as session fixtures: each
started once, only when a test asks for it, and stopped (its data removed) at the end of the
session.

Without the server binaries or the Python driver, the tests that take them skip, saying why;
CI installs both (.ci/run) and sets DISTLOCK_REQUIRE_DATABASES, so that there they fail
instead of passing without having run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TypeVar

import pytest

from devkit.databases import (
    REQUIRE_ENV,
    DatabaseServer,
    DatabaseUnavailable,
    MariaDBServer,
    PostgresServer,
)

#: ``real_database``'s params, and the fixture that starts each.
DATABASE_FIXTURES = {"postgresql": "postgres_server", "mariadb": "mariadb_server"}
_S = TypeVar("_S", bound=DatabaseServer)


def databases_required() -> bool:
    """Whether missing database servers fail tests instead of skipping them (CI)."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


@contextlib.contextmanager
def serving(server: _S) -> Iterator[_S]:
    """Start ``server`` for the block and stop it afterwards. If it cannot run here (no
    binaries, no driver), skip the test, or fail it when DISTLOCK_REQUIRE_DATABASES is set."""
    try:
        server.start()
    except DatabaseUnavailable as exc:
        if databases_required():
            pytest.fail(f"{REQUIRE_ENV} is set (CI) but {server.label} cannot run here: {exc}")
        pytest.skip(f"{server.label} tests need a real server: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server of the session's own, with a database and user for Django
    (``postgres_server.django_settings()``)."""
    with serving(PostgresServer()) as server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer]:
    """A real MariaDB server of the session's own, with a database and user for Django
    (``mariadb_server.django_settings()``)."""
    with serving(MariaDBServer()) as server:
        yield server


@pytest.fixture(scope="session", params=list(DATABASE_FIXTURES))
def real_database(request: pytest.FixtureRequest) -> DatabaseServer:
    """Each real database server in turn: a test taking it runs once on PostgreSQL and once
    on MariaDB (ids ``postgresql`` and ``mariadb``)."""
    server: DatabaseServer = request.getfixturevalue(DATABASE_FIXTURES[request.param])
    return server
