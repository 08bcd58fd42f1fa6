"""The Node.js client's README example runs as written (issue 26, acceptance 4): the block is
cut from clients/node/README.md and run by node, importing the client by its package name,
against a real Redis server; a Python holder of the same lock makes it wait and give up."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import distlock
from tests.support.configs import distlock_settings
from tests.support.node import Node
from tests.support.redis_server import RedisServer

README = Path(__file__).resolve().parent.parent.parent / "clients" / "node" / "README.md"
pytestmark = pytest.mark.django_db(databases=[])


def example() -> str:
    [block] = re.findall(r"## Example\n\n```js\n(.*?)```", README.read_text(), re.S)
    return block


def run_example(node: Node, folder: Path, url: str) -> subprocess.CompletedProcess[str]:
    """Run the example as a user's file would: an .mjs beside a node_modules that has the
    client under its package name."""
    (folder / "node_modules").mkdir(exist_ok=True)
    link = folder / "node_modules" / "distlock-client"
    if not link.exists():
        link.symlink_to(node.client, target_is_directory=True)
    script = folder / "example.mjs"
    script.write_text(example())
    return subprocess.run(
        [node.binary, str(script)],
        cwd=folder,
        env={**os.environ, "REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_readme_example_runs_as_written(
    node_client: Node, redis_server: RedisServer, settings: Any, tmp_path: Path
) -> None:
    redis_server.flushall()
    done = run_example(node_client, tmp_path, redis_server.url)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"holding reports:daily, fencing token \d{16}\n", done.stdout)
    # It released the lock: a Python process (the default prefix, as in the example) takes it.
    aliases, caches = distlock_settings("redis", redis_server.url)
    aliases["default"]["KEY_PREFIX"] = "distlock"
    settings.DISTLOCK, settings.CACHES = aliases, caches
    python = distlock.lock("reports:daily", ttl=30)
    assert python.acquire(wait=0)
    # While Python holds it, the example waits its 5 s and says so.
    started = time.monotonic()
    done = run_example(node_client, tmp_path, redis_server.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "someone else held reports:daily for 5 s\n"
    assert time.monotonic() - started >= 5
    python.release()
