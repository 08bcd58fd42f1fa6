"""Real PostgreSQL and MariaDB servers for the test suite, on free loopback ports.

Shaped like devkit/redis_server.py, and nothing here touches a database server that
happens to be running already (such as the machine's PostgreSQL on 5432 or MariaDB on 3306): every
server is a child process of the test run, initialised in a temporary directory of its own
(mode 0700, removed by :meth:`DatabaseServer.stop` or at exit), listening on a port picked
at random on 127.0.0.1, tuned for speed, not durability (no fsync)::

    with PostgresServer() as server:       # initdb, postgres, a database and a login role
        server.django_settings()           # a DATABASES entry for Django
        server.env()                       # {DATABASES_VARIABLE: JSON}, for processes

* :class:`PostgresServer` -- the machine's binaries (``/usr/lib/postgresql/*/bin``, the
  newest; or ``DISTLOCK_POSTGRES_BIN``, a directory with ``initdb`` and ``postgres``).
  PostgreSQL refuses to run as root: as root, ``initdb`` and ``postgres`` run as ``nobody``
  (or ``DISTLOCK_DATABASE_USER``), which owns the directory.
* :class:`MariaDBServer` -- Debian's ``mariadbd`` and ``mariadb-install-db`` (or
  ``DISTLOCK_MARIADBD`` and ``DISTLOCK_MARIADB_INSTALL_DB``), with ``--no-defaults`` so that
  no my.cnf of the machine applies.

Each creates a database and a user with a password, as a project would have, which Django
connects to over TCP (``HOST`` 127.0.0.1, never ``localhost``: that would mean the machine's
default socket). Processes a test starts read the DATABASES it gives them from the
``DISTLOCK_TEST_DATABASES`` environment variable (:func:`databases_from_env`; the settings of
devkit/live_project and tests/support/env_settings.py do).

Missing binaries or Python drivers raise :class:`DatabaseUnavailable`; the fixtures
(devkit/database_fixtures.py) then skip, or fail when ``DISTLOCK_REQUIRE_DATABASES`` is set
(CI). Server processes never outlive the test run: they are started like the redis-servers
(:func:`devkit.servers.spawn_managed`: own process group, killed at exit, and when the
process that started them dies).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from devkit.processes import DATABASES_VARIABLE, distlock_variables
from devkit.servers import (
    HOST,
    ManagedServer,
    free_port,
    kill_process,
    spawn_managed,
    stop_managed,
    temporary_directory,
)

# MariaDB's driver is PyMySQL (the test extra's: pure Python, nothing to compile), which
# Django's MySQL backend and the code below import as MySQLdb. mysqlclient, the usual
# MySQLdb, has no Linux wheel: it needs libmariadb-dev, pkg-config and a C compiler. PyMySQL
# 1.2.4 and later tell Django's version check they are mysqlclient 2.2.8 (5.2 to 6.1 ask for
# 2.2.1 or newer).
with contextlib.suppress(ImportError):
    import pymysql

    pymysql.install_as_MySQLdb()

__all__ = [
    "DATABASES_ENV",
    "REQUIRE_ENV",
    "DatabaseServer",
    "DatabaseUnavailable",
    "MariaDBServer",
    "PostgresServer",
    "databases_env",
    "databases_from_env",
    "django_connections",
    "find_mariadb",
    "find_postgres_bin",
]

#: The environment variable that carries DATABASES (JSON) to the processes a test starts.
DATABASES_ENV = DATABASES_VARIABLE
#: Set (CI), missing servers fail the tests that need them instead of skipping them.
REQUIRE_ENV = "DISTLOCK_REQUIRE_DATABASES"
#: Ports of servers the machine may run already: never ours.
RESERVED_PORTS = frozenset({5432, 3306, 6379})
#: Seconds :meth:`DatabaseServer.start` may take (initialisation included).
START_TIMEOUT = 60.0
#: Seconds :meth:`DatabaseServer.stop` waits for a shutdown before SIGKILL.
STOP_TIMEOUT = 10.0
PASSWORD = "distlock-tests-only"
_S = TypeVar("_S", bound="DatabaseServer")
# Names of databases and users: used in SQL as they are (quoted), so nothing that needs escaping.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class DatabaseUnavailable(RuntimeError):
    """A server's binaries or its Python driver are not installed here."""


# --------------------------------------------------------------------------- for Django


def _copy(databases: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A deep copy of ``databases`` (Django fills in and changes the dicts it is given)."""
    return json.loads(json.dumps(databases))


def databases_env(databases: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``{DISTLOCK_TEST_DATABASES: JSON}``: environment that gives a process these
    DATABASES (``{"default": server.django_settings(), ...}``)."""
    return distlock_variables(databases=databases)


def databases_from_env(environ: Mapping[str, str] = os.environ) -> dict[str, dict[str, Any]]:
    """The DATABASES a test passed through ``DISTLOCK_TEST_DATABASES``; ``{}`` without."""
    raw = environ.get(DATABASES_ENV)
    return json.loads(raw) if raw else {}


@contextlib.contextmanager
def django_connections(databases: Mapping[str, Mapping[str, Any]]) -> Iterator[Any]:
    """A :class:`django.db.utils.ConnectionHandler` of its own for ``databases`` (alias ->
    DATABASES entry), closed afterwards: Django connections to a server without changing
    the settings or ``django.db.connections``. ``handler[alias]`` is a DatabaseWrapper.

    Under pytest-django a test must allow database access (``django_db_blocker.unblock()``).
    """
    from django.db.utils import ConnectionHandler

    databases = {"default": {"ENGINE": "django.db.backends.dummy"}, **_copy(databases)}
    handler = ConnectionHandler(databases)  # Django insists on a "default" alias
    try:
        yield handler
    finally:
        handler.close_all()


# --------------------------------------------------------------------------- binaries


def _executable(path: str | os.PathLike[str] | None) -> bool:
    return path is not None and Path(path).is_file() and os.access(path, os.X_OK)


def _version_key(directory: str) -> tuple[int, ...]:
    """Sort key of ``/usr/lib/postgresql/<version>/bin``: its version's numbers."""
    return tuple(int(part) for part in re.findall(r"\d+", Path(directory).parent.name))


def find_postgres_bin() -> Path:
    """The directory holding PostgreSQL's ``initdb`` and ``postgres``.

    ``$DISTLOCK_POSTGRES_BIN`` if set, else the newest ``/usr/lib/postgresql/*/bin`` (Debian),
    else the directory of a ``postgres`` on PATH. Raises :class:`DatabaseUnavailable`.
    """
    configured = os.environ.get("DISTLOCK_POSTGRES_BIN")
    candidates = (
        [configured]
        if configured
        else sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    )
    on_path = shutil.which("postgres")
    if not configured and on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for directory in candidates:
        if all(_executable(Path(directory) / name) for name in ("initdb", "postgres")):
            return Path(directory)
    where = f"DISTLOCK_POSTGRES_BIN={configured!r}" if configured else "/usr/lib/postgresql/*/bin"
    raise DatabaseUnavailable(
        f"no PostgreSQL server binaries (initdb, postgres) in {where}: install Debian's "
        "postgresql (apt-get install -y postgresql) or set DISTLOCK_POSTGRES_BIN"
    )


def find_mariadb() -> tuple[str, str]:
    """``(mariadbd, mariadb-install-db)``: ``$DISTLOCK_MARIADBD`` and
    ``$DISTLOCK_MARIADB_INSTALL_DB`` if set, else Debian's (``/usr/sbin/mariadbd``), else the
    ones on PATH (``mysqld`` and ``mysql_install_db`` also do). Raises
    :class:`DatabaseUnavailable`."""
    server = os.environ.get("DISTLOCK_MARIADBD") or next(
        (
            path
            for path in (
                "/usr/sbin/mariadbd",
                shutil.which("mariadbd"),
                "/usr/sbin/mysqld",
                shutil.which("mysqld"),
            )
            if _executable(path)
        ),
        None,
    )
    install = os.environ.get("DISTLOCK_MARIADB_INSTALL_DB") or next(
        (
            path
            for path in (
                shutil.which("mariadb-install-db"),
                "/usr/bin/mariadb-install-db",
                shutil.which("mysql_install_db"),
            )
            if _executable(path)
        ),
        None,
    )
    if not (_executable(server) and _executable(install)):
        raise DatabaseUnavailable(
            "no MariaDB server binaries (mariadbd, mariadb-install-db): install Debian's "
            "mariadb-server (apt-get install -y mariadb-server) or set DISTLOCK_MARIADBD and "
            "DISTLOCK_MARIADB_INSTALL_DB"
        )
    assert server is not None and install is not None
    return server, install


def _require_module(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise DatabaseUnavailable(
            f"the Python driver {module} is missing: pip install "
            f"{package!r} (the 'test' extra has it)"
        )


def _unprivileged_user() -> tuple[int, int] | None:
    """``(uid, gid)`` that servers refusing root run as: None unless this process is root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("DISTLOCK_DATABASE_USER", "nobody")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise DatabaseUnavailable(
            f"running as root, but there is no user {name!r} to run "
            "PostgreSQL as (set DISTLOCK_DATABASE_USER)"
        ) from None
    return entry.pw_uid, entry.pw_gid


class _Templates:
    """Data directories as initialisation left them (before any start), kept for the test
    run: a server initialised the same way again copies one (``cp -a``, a tenth of a second)
    instead of running initdb or mariadb-install-db (a second or more)."""

    def __init__(self) -> None:
        self.paths: dict[tuple[Any, ...], Path] = {}


_TEMPLATES = _Templates()


def _free_port() -> int:
    """A free port on 127.0.0.1 that is none of the machine's usual servers'."""
    while True:
        port = free_port()
        if port not in RESERVED_PORTS:
            return port


# --------------------------------------------------------------------------- servers


class DatabaseServer(ManagedServer):
    """One real database server process on 127.0.0.1 with a database and a user.

    :meth:`start` makes a fresh temporary directory, initialises the server's data directory
    in it, launches the server on a free port (another if that one is taken first), waits
    until it answers, and creates the database ``name`` and the user ``user`` (password
    ``password``, allowed to create databases, as Django's test runner needs); it returns
    ``self``. :meth:`stop` shuts the server down and removes the directory.
    """

    #: Django's ``connection.vendor`` for this server.
    vendor: ClassVar[str]
    #: The server's name, for messages.
    label: ClassVar[str]
    #: The Django database backend.
    engine: ClassVar[str]
    #: The signal that shuts the server down quickly.
    stop_signal: ClassVar[int] = signal.SIGTERM

    def __init__(
        self, *, name: str = "distlock", user: str = "distlock", password: str = PASSWORD
    ) -> None:
        for what, value in (("name", name), ("user", user)):
            if not _PLAIN_NAME.fullmatch(value):
                raise ValueError(f"{what} must be a plain SQL identifier, not {value!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.,:;!?@#%^&*()+=-]+", password):
            raise ValueError("the password may not hold quotes, backslashes or spaces")
        self.name = name
        self.user = user
        self.password = password
        self.host = HOST
        self.directory: Path | None = None
        self.databases: list[str] = []
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._run_as: tuple[int, int] | None = None
        self._log_offsets: dict[Path, int] = {}

    # -- addresses and state -----------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on (set by :meth:`start`)."""
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} has no port until start() is called")
        return self._port

    @property
    def data_directory(self) -> Path:
        """The server's data directory (inside :attr:`directory`)."""
        return self._directory / "data"

    @property
    def _directory(self) -> Path:
        if self.directory is None:
            raise RuntimeError(f"{self!r} has no directory: it is not started")
        return self.directory

    @property
    def pid(self) -> int | None:
        """Process id of the server (PostgreSQL's postmaster), or None."""
        return self._proc.pid if self.is_running() and self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<{type(self).__name__} {self.host}:{self._port} {state}>"

    # -- for Django --------------------------------------------------------------------

    def django_settings(self, name: str | None = None) -> dict[str, Any]:
        """A DATABASES entry for database ``name`` (default: :attr:`name`) of this server,
        as :attr:`user`. ``TEST["NAME"]`` is ``test_<name>``, for Django's test runner."""
        name = name or self.name
        return {
            "ENGINE": self.engine,
            "NAME": name,
            "USER": self.user,
            "PASSWORD": self.password,
            "HOST": self.host,
            "PORT": str(self.port),
            "OPTIONS": self._options(),
            "TEST": {"NAME": f"test_{name}", **self._test_settings()},
        }

    def env(self, alias: str = "default", name: str | None = None) -> dict[str, str]:
        """Environment for a process whose settings read ``DISTLOCK_TEST_DATABASES``:
        DATABASES with ``alias`` on database ``name`` of this server."""
        return databases_env({alias: self.django_settings(name)})

    def _options(self) -> dict[str, Any]:
        return {}

    def _test_settings(self) -> dict[str, Any]:
        return {}

    # -- databases ---------------------------------------------------------------------

    def create_database(self, name: str | None = None) -> str:
        """Create database ``name`` (default: a new unique name), owned by / open to
        :attr:`user`; return its name."""
        name = name or f"{self.name}_{uuid.uuid4().hex[:12]}"
        if not _PLAIN_NAME.fullmatch(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self._create_database(name)
        self.databases.append(name)
        return name

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` (connections to it are ended)."""
        self._drop_database(name)
        with contextlib.suppress(ValueError):
            self.databases.remove(name)

    def connect(self, name: str | None = None) -> Any:
        """A new DB-API connection (the driver's own, not Django's) to database ``name``
        as :attr:`user`, over TCP. The caller closes it."""
        raise NotImplementedError

    def _create_database(self, name: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _drop_database(self, name: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------

    def _check_installed(self) -> None:  # pragma: no cover - overridden
        """Raise :class:`DatabaseUnavailable` when binaries or driver are missing."""
        raise NotImplementedError

    def _initialise(self, deadline: float) -> None:  # pragma: no cover - overridden
        """Create the data directory (initdb...)."""
        raise NotImplementedError

    def command(self) -> list[str]:  # pragma: no cover - overridden
        """The server's command line for the current port."""
        raise NotImplementedError

    def _is_ours(self) -> bool:  # pragma: no cover - overridden
        """Whether this server answers on the port (not another process that took it)."""
        raise NotImplementedError

    def _create_user(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def output_file(self) -> Path:
        """Where the server's stdout and stderr (its log) go."""
        return self._directory / "server.log"

    def _log_files(self) -> list[Path]:
        return [self.output_file]

    def start(self: _S, timeout: float = START_TIMEOUT) -> _S:
        """Initialise, launch and set up the server (see the class); return ``self``.

        Raises :class:`DatabaseUnavailable` when binaries or the driver are missing, and
        RuntimeError, with the command and the end of the server's log, when it does not
        come up. On any failure, nothing is left running or on disk.
        """
        if self.is_running():
            raise RuntimeError(f"{self!r} is already running")
        self._check_installed()
        deadline = time.monotonic() + timeout
        try:
            self._run_as = self._user_to_run_as()
            self.directory = temporary_directory(self, f"distlock-{self.label.lower()}-")
            if self._run_as is not None:
                os.chown(self.directory, *self._run_as)
            self._prepare_directory()
            template = _TEMPLATES.paths.get(self._template_key())
            if template is not None and template.is_dir():
                self._copy(template, self.data_directory, deadline)
            else:
                self._initialise(deadline)
                self._keep_as_template(deadline)
            while True:
                self._port = _free_port()
                outcome = self._launch_once(deadline)
                if outcome == "ok":
                    break
                if outcome != "port in use" or time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"{self.label} did not start on {self.host}:{self._port} ({outcome}).\n"
                        f"command: {subprocess.list2cmdline(self.command())}\n"
                        f"{self.log_tail()}"
                    )
            self._create_user()
            self.databases = []
            self.create_database(self.name)
        except BaseException:
            self.stop()
            raise
        return self

    def _user_to_run_as(self) -> tuple[int, int] | None:
        return None

    def _prepare_directory(self) -> None:
        """Make what the server needs in :attr:`directory` besides its data directory."""

    def _template_key(self) -> tuple[Any, ...]:
        """What a data directory depends on: servers with the same key may share one."""
        return (type(self).__name__, self._run_as, self.password)

    def _copy(self, source: Path, target: Path, deadline: float) -> None:
        """Copy a data directory as the user the server runs as (who then owns the copy)."""
        self._run_setup(
            [shutil.which("cp") or "/bin/cp", "-a", "--", str(source), str(target)],
            deadline,
            self._directory / "copy.log",
        )

    def _keep_as_template(self, deadline: float) -> None:
        directory = temporary_directory(_TEMPLATES, f"distlock-{self.label.lower()}-template-")
        if self._run_as is not None:
            os.chown(directory, *self._run_as)
        self._copy(self.data_directory, directory / "data", deadline)
        _TEMPLATES.paths[self._template_key()] = directory / "data"

    def _run_setup(self, command: Sequence[str], deadline: float, log: Path) -> None:
        """Run a setup command (initdb...) to completion, like a server (killed with the
        test run); RuntimeError with its output if it fails or outlasts ``deadline``."""
        user, group = self._run_as or (None, None)
        proc = spawn_managed(command, cwd=self._directory, output=log, user=user, group=group)
        try:
            returncode = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            kill_process(proc)  # anything it left in its process group, too
        if returncode != 0:
            output = log.read_text(errors="replace").splitlines()[-30:]
            state = "timed out" if returncode is None else f"exited with status {returncode}"
            raise RuntimeError(f"{subprocess.list2cmdline(command)} {state}:\n" + "\n".join(output))

    def _launch_once(self, deadline: float) -> str:
        """One attempt: "ok", or why it failed ("port in use", ...). Cleans up on failure."""
        self._log_offsets = {
            path: path.stat().st_size if path.exists() else 0 for path in self._log_files()
        }
        user, group = self._run_as or (None, None)
        proc = spawn_managed(
            self.command(), cwd=self._directory, output=self.output_file, user=user, group=group
        )
        self._proc = proc
        last_error: BaseException | None = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if self._is_ours():
                    return "ok"
            except Exception as exc:  # the driver's "not yet": refused, starting up...
                last_error = exc
            time.sleep(0.05)
        kill_process(proc)
        self._proc = None
        if "address already in use" in self.log_tail().lower():
            return "port in use"
        if proc.returncode is not None and proc.returncode != -signal.SIGKILL:
            return f"exited with status {proc.returncode}"
        return f"no answer in time (last error: {last_error!r})"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Shut the server down (SIGKILL after ``timeout``), reap it and remove its
        directory, data included. Idempotent; safe on a server that never started."""
        if self._proc is not None:
            stop_managed(self._proc, timeout, self.stop_signal)
        self._proc = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None


class PostgresServer(DatabaseServer):
    """A real PostgreSQL server (see the module's docstring), fsync off.

    Its superuser is ``postgres`` (same password as :attr:`user`); local socket connections
    (in the server's own directory) are trusted, TCP ones need the password (scram-sha-256).
    """

    vendor = "postgresql"
    label = "PostgreSQL"
    engine = "django.db.backends.postgresql"
    stop_signal = signal.SIGINT  # "fast" shutdown: ends open sessions instead of waiting
    superuser = "postgres"

    def __init__(
        self,
        *,
        name: str = "distlock",
        user: str = "distlock",
        password: str = PASSWORD,
        bin_dir: str | os.PathLike[str] | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """``bin_dir`` defaults to :func:`find_postgres_bin`; ``settings`` are more ``-c``
        configuration parameters (``{"max_connections": "200"}``)."""
        super().__init__(name=name, user=user, password=password)
        self.bin_dir = Path(bin_dir) if bin_dir is not None else None
        self.settings = {
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "100",
            "shared_buffers": "32MB",
            **(settings or {}),
        }

    @property
    def socket_directory(self) -> Path:
        return self._directory / "socket"

    def _check_installed(self) -> None:
        if self.bin_dir is None:
            self.bin_dir = find_postgres_bin()
        _require_module("psycopg", "psycopg[binary]")

    def _template_key(self) -> tuple[Any, ...]:
        return (*super()._template_key(), self.bin_dir)

    def _user_to_run_as(self) -> tuple[int, int] | None:
        return _unprivileged_user()

    def _options(self) -> dict[str, Any]:
        return {"connect_timeout": 5}

    def _prepare_directory(self) -> None:
        self.socket_directory.mkdir(mode=0o700)
        if self._run_as is not None:
            os.chown(self.socket_directory, *self._run_as)

    def _initialise(self, deadline: float) -> None:
        assert self.bin_dir is not None
        password_file = self._directory / "superuser-password"
        password_file.write_text(self.password + "\n")
        if self._run_as is not None:
            os.chown(password_file, *self._run_as)
        self._run_setup(
            [
                str(self.bin_dir / "initdb"),
                "--pgdata",
                str(self.data_directory),
                "--username",
                self.superuser,
                "--pwfile",
                str(password_file),
                "--auth-local",
                "trust",
                "--auth-host",
                "scram-sha-256",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ],
            deadline,
            self._directory / "initdb.log",
        )
        password_file.unlink()

    def command(self) -> list[str]:
        assert self.bin_dir is not None
        settings = [arg for key, value in self.settings.items() for arg in ("-c", f"{key}={value}")]
        return [
            str(self.bin_dir / "postgres"),
            "-D",
            str(self.data_directory),
            "-p",
            str(self.port),
            "-h",
            self.host,
            "-k",
            str(self.socket_directory),
            *settings,
        ]

    def _connect(self, user: str, password: str, name: str) -> Any:
        import psycopg

        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=user,
            password=password,
            dbname=name,
            connect_timeout=2,
            autocommit=True,
        )

    def _superuser(self) -> Any:
        return self._connect(self.superuser, self.password, "postgres")

    def connect(self, name: str | None = None) -> Any:
        return self._connect(self.user, self.password, name or self.name)

    def _is_ours(self) -> bool:
        with self._superuser() as connection:
            row = connection.execute("SHOW data_directory").fetchone()
        return row is not None and Path(row[0]) == self.data_directory

    def _create_user(self) -> None:
        from psycopg import sql

        with self._superuser() as connection:
            connection.execute(
                sql.SQL("CREATE ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                    sql.Identifier(self.user), sql.Literal(self.password)
                )
            )
            # So that tests can ask, as this user, which data directory they are on.
            connection.execute(
                sql.SQL("GRANT pg_read_all_settings TO {}").format(sql.Identifier(self.user))
            )

    def _create_database(self, name: str) -> None:
        from psycopg import sql

        with self._superuser() as connection:
            connection.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(name), sql.Identifier(self.user)
                )
            )

    def _drop_database(self, name: str) -> None:
        from psycopg import sql

        with self._superuser() as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


class MariaDBServer(DatabaseServer):
    """A real MariaDB server (see the module's docstring), InnoDB's flushing relaxed.

    Its ``root`` user (no password) only connects through the server's own socket; the
    test user (``'distlock'@'%'``, all privileges) connects over TCP.
    """

    vendor = "mysql"  # Django's vendor for MariaDB too
    label = "MariaDB"
    engine = "django.db.backends.mysql"
    charset = "utf8mb4"
    collation = "utf8mb4_unicode_ci"
    # Small and fast: a 26 MB data directory, nothing flushed at each commit.
    speed_options = (
        "--innodb-buffer-pool-size=32M",
        "--innodb-log-file-size=8M",
        "--innodb-flush-log-at-trx-commit=0",
        "--innodb-doublewrite=0",
        "--innodb-use-native-aio=0",
        "--skip-log-bin",
    )

    def __init__(
        self,
        *,
        name: str = "distlock",
        user: str = "distlock",
        password: str = PASSWORD,
        binaries: tuple[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``binaries`` is ``(mariadbd, mariadb-install-db)``, by default
        :func:`find_mariadb`'s; ``extra_args`` more mariadbd options."""
        super().__init__(name=name, user=user, password=password)
        self.binaries = binaries
        self.extra_args = list(extra_args)

    @property
    def socket_path(self) -> Path:
        return self._directory / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self._directory / "error.log"

    def _log_files(self) -> list[Path]:
        return [self.error_log, self.output_file]

    def _check_installed(self) -> None:
        if self.binaries is None:
            self.binaries = find_mariadb()
        _require_module("pymysql", "PyMySQL")

    def _template_key(self) -> tuple[Any, ...]:
        return (*super()._template_key(), self.binaries, self.speed_options)

    def _options(self) -> dict[str, Any]:
        return {"charset": self.charset, "connect_timeout": 5}

    def _test_settings(self) -> dict[str, Any]:
        return {"CHARSET": self.charset, "COLLATION": self.collation}

    def _common_args(self) -> list[str]:
        assert self.binaries is not None
        basedir = Path(self.binaries[0]).resolve().parent.parent  # /usr/sbin/mariadbd: /usr
        as_root = ["--user=root"] if os.geteuid() == 0 else []
        return [
            f"--basedir={basedir}",
            f"--datadir={self.data_directory}",
            *as_root,
            "--skip-name-resolve",
            *self.speed_options,
        ]

    def _initialise(self, deadline: float) -> None:
        assert self.binaries is not None
        self._run_setup(
            [
                self.binaries[1],
                "--no-defaults",
                *self._common_args(),
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            deadline,
            self._directory / "install-db.log",
        )

    def command(self) -> list[str]:
        assert self.binaries is not None
        return [
            self.binaries[0],
            "--no-defaults",
            *self._common_args(),
            f"--port={self.port}",
            f"--bind-address={self.host}",
            f"--socket={self.socket_path}",
            f"--pid-file={self._directory / 'mysqld.pid'}",
            f"--log-error={self.error_log}",
            f"--tmpdir={self._directory}",
            f"--character-set-server={self.charset}",
            f"--collation-server={self.collation}",
            *self.extra_args,
        ]

    def _root(self) -> Any:
        """root's connection, through this server's own socket (so: this server)."""
        import MySQLdb

        return MySQLdb.connect(
            unix_socket=str(self.socket_path), user="root", connect_timeout=2, charset=self.charset
        )

    def connect(self, name: str | None = None) -> Any:
        import MySQLdb

        return MySQLdb.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=name or self.name,
            connect_timeout=2,
            charset=self.charset,
        )

    def _execute(self, *statements: str) -> None:
        with contextlib.closing(self._root()) as connection:
            cursor = connection.cursor()
            for statement in statements:
                cursor.execute(statement)

    def _is_ours(self) -> bool:
        if not self.socket_path.exists():
            return False
        with contextlib.closing(self._root()) as connection:
            cursor = connection.cursor()
            cursor.execute("SELECT @@port")
            row = cursor.fetchone()
        return row is not None and int(row[0]) == self.port

    def _create_user(self) -> None:
        account = f"'{self.user}'@'%'"
        self._execute(
            f"CREATE USER {account} IDENTIFIED BY '{self.password}'",
            f"GRANT ALL PRIVILEGES ON *.* TO {account}",
        )

    def _create_database(self, name: str) -> None:
        self._execute(
            f"CREATE DATABASE `{name}` CHARACTER SET {self.charset} COLLATE {self.collation}"
        )

    def _drop_database(self, name: str) -> None:
        self._execute(f"DROP DATABASE IF EXISTS `{name}`")
