"""The real PostgreSQL and MariaDB servers of devkit/databases.py, and gunicorn's workers of
devkit/live_server_process.py: ports and data of their own, Django connects and transactions
work, nothing is left behind, and the workers are separate processes on the database."""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from devkit.database_fixtures import serving
from devkit.databases import (
    DATABASES_ENV,
    REQUIRE_ENV,
    RESERVED_PORTS,
    DatabaseServer,
    MariaDBServer,
    PostgresServer,
    databases_from_env,
    django_connections,
)
from devkit.live_server_process import LiveServerProcess
from devkit.processes import child_env, distlock_variables, run_process
from devkit.redis_server import RedisServer
from devkit.servers import managed_processes, wait_until

# The SQL asking a server where its data directory is, per Django vendor.
DATA_DIRECTORY_SQL = {"postgresql": "SHOW data_directory", "mysql": "SELECT @@datadir"}


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def database(real_database: DatabaseServer) -> Iterator[dict[str, Any]]:
    """A new database of this test's own on the server: its DATABASES entry."""
    name = real_database.create_database()
    yield real_database.django_settings(name)
    real_database.drop_database(name)


@pytest.fixture
def own_connections(database: dict[str, Any], django_db_blocker: Any) -> Iterator[Any]:
    """Django connections of the test's own ("one" and "two", separate sessions) to it."""
    with (
        django_db_blocker.unblock(),
        django_connections({"one": database, "two": database}) as handler,
    ):
        yield handler


def test_each_server_listens_on_a_free_port_of_its_own(real_database: DatabaseServer) -> None:
    assert real_database.port not in RESERVED_PORTS
    assert _listening(real_database.port)
    settings = real_database.django_settings()
    assert (settings["HOST"], settings["PORT"]) == ("127.0.0.1", str(real_database.port))
    assert settings["ENGINE"] == real_database.engine
    assert settings["TEST"]["NAME"] == "test_distlock"


def test_django_connects_as_the_user_with_its_password(
    real_database: DatabaseServer, own_connections: Any
) -> None:
    connection = own_connections["one"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user"
            if connection.vendor == "postgresql"
            else "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)"
        )
        assert cursor.fetchone()[0] == real_database.user
    assert connection.vendor == real_database.vendor
    if connection.vendor == "mysql":
        assert connection.mysql_is_mariadb
    wrong = {**real_database.django_settings(), "PASSWORD": "wrong"}
    with django_connections({"wrong": wrong}) as handler, pytest.raises(Exception) as caught:
        handler["wrong"].ensure_connection()
    assert "password" in str(caught.value).lower() or "denied" in str(caught.value).lower()


def test_a_table_written_in_a_transaction_is_seen_once_committed(own_connections: Any) -> None:
    one, two = own_connections["one"], own_connections["two"]
    table = one.ops.quote_name("ledger")
    with one.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, note VARCHAR(20))")

    def notes(connection: Any) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT note FROM {table} ORDER BY id")
            return [row[0] for row in cursor.fetchall()]

    one.set_autocommit(False)
    with one.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} VALUES (%s, %s)", [1, "committed"])
    assert notes(one) == ["committed"]
    assert notes(two) == [], "another session saw an uncommitted row"
    one.commit()
    assert notes(two) == ["committed"]
    with one.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} VALUES (%s, %s)", [2, "rolled back"])
    one.rollback()
    one.set_autocommit(True)
    assert notes(one) == notes(two) == ["committed"]


def test_the_data_directory_is_the_fixtures_own(
    real_database: DatabaseServer, own_connections: Any
) -> None:
    directory = real_database.directory
    assert directory is not None and real_database.data_directory.parent == directory
    assert stat.S_IMODE(directory.stat().st_mode) & 0o077 == 0, "others may enter it"
    with own_connections["one"].cursor() as cursor:
        cursor.execute(DATA_DIRECTORY_SQL[real_database.vendor])
        reported = Path(cursor.fetchone()[0])
    assert reported == real_database.data_directory
    if isinstance(real_database, PostgresServer) and os.geteuid() == 0:
        assert directory.stat().st_uid != 0  # PostgreSQL refuses root: it runs as nobody
        assert psutil.Process(real_database.pid).uids().real != 0


@pytest.mark.parametrize(
    "server_class", [PostgresServer, MariaDBServer], ids=["postgresql", "mariadb"]
)
def test_stop_ends_every_process_and_removes_the_data(
    server_class: type[DatabaseServer],
) -> None:
    before = managed_processes()
    with serving(server_class()) as server:
        pid, port, directory = server.pid, server.port, server.directory
        assert pid is not None and directory is not None
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        assert directory.is_dir() and server.data_directory.is_dir()
    assert not server.is_running() and server.pid is None
    assert not directory.exists()
    assert not _listening(port)
    assert not [p.pid for p in processes if _alive(p.pid)]
    assert not [p.pid for p in managed_processes() - before if p.poll() is None]
    server.stop()  # idempotent


def test_missing_servers_skip_locally_and_fail_when_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DISTLOCK_POSTGRES_BIN", str(tmp_path))  # no initdb in there
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with (
        pytest.raises(pytest.skip.Exception, match="DISTLOCK_POSTGRES_BIN"),
        serving(PostgresServer()),
    ):
        pass
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=REQUIRE_ENV), serving(PostgresServer()):
        pass


def test_processes_get_the_databases_through_the_environment(real_database: DatabaseServer) -> None:
    env = real_database.env("other", name="elsewhere")
    assert list(env) == [DATABASES_ENV]
    assert databases_from_env(env) == {"other": real_database.django_settings("elsewhere")}
    assert databases_from_env({}) == {}


def _get_json(server: LiveServerProcess, path: str) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, body
        return dict(json.loads(body))
    finally:
        connection.close()


def test_gunicorn_workers_are_processes_on_the_databases(
    postgres_server: PostgresServer, mariadb_server: MariaDBServer, redis_server: RedisServer
) -> None:
    """Three sync workers of the live project, with both servers as databases: concurrent
    requests are served by several of them, each connected to both servers."""
    servers = {"default": postgres_server, "mariadb": mariadb_server}
    workers = requests = 3
    with LiveServerProcess(
        "devkit.live_project.wsgi:application",
        server="gunicorn",
        workers=workers,
        preload=True,
        settings="devkit.live_project.settings",
        ready_path="/health/",
        env=distlock_variables(
            url=redis_server.url,
            databases={alias: server.django_settings() for alias, server in servers.items()},
        ),
    ) as server:
        worker_pids = server.worker_pids()
        assert len(worker_pids) == workers and server.pid not in worker_pids
        barrier = threading.Barrier(requests)

        def ask(_: int) -> dict[str, Any]:
            barrier.wait(timeout=10)
            # A sync worker serves one request at a time: while it sleeps, others answer.
            return _get_json(server, "/process/?seconds=0.2")

        with ThreadPoolExecutor(requests) as pool:
            answers = list(pool.map(ask, range(requests)))
        master = server.pid
    served_by = {answer["pid"] for answer in answers}
    assert len(served_by) > 1, answers
    assert served_by <= worker_pids
    expected = {
        alias: {"vendor": server.vendor, "port": server.port} for alias, server in servers.items()
    }
    assert all(answer["databases"] == expected for answer in answers), answers
    assert master is not None
    wait_until(
        lambda: not any(_alive(pid) for pid in {master, *worker_pids}),
        5,
        "gunicorn's processes to exit",
    )


def test_manage_py_check_is_clean_on_each_database(
    real_database: DatabaseServer, redis_server: RedisServer
) -> None:
    """distlock's unmanaged HeldLock model gives MySQL/MariaDB no reason to warn (mysql.W003
    for a unique CharField over 255 characters), as no project using distlock should see."""
    import sys

    env = child_env(
        python_path=False,
        settings="devkit.shop.settings",
        url=redis_server.url,
        **real_database.env(),
    )
    done = run_process(
        [sys.executable, "-m", "django", "check", "--database", "default"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr
