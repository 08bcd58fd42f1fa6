"""Node.js for the tests that run the reference client (clients/node/) beside Python.

``node_client`` finds ``node`` and ``npm`` and installs the client's dependencies from its
lockfile (``npm ci``, from npm's cache when it can) when ``clients/node/node_modules`` is
missing. Without Node.js the tests that take it skip, saying why; CI installs it (.ci/run)
and sets DISTLOCK_REQUIRE_NODE, so that there they fail instead of passing without having run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devkit.paths import ROOT
from devkit.processes import run_process

CLIENT = ROOT / "clients" / "node"
REQUIRE_ENV = "DISTLOCK_REQUIRE_NODE"
NPM_CI_TIMEOUT = 300


@dataclass(frozen=True)
class Node:
    """The node binary, and the reference client's folder with its dependencies installed."""

    binary: str
    client: Path


def node_required() -> bool:
    """Whether a missing Node.js fails tests instead of skipping them (CI)."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def unavailable(reason: str) -> None:
    if node_required():
        pytest.fail(f"{REQUIRE_ENV} is set (CI) but {reason}")
    pytest.skip(f"the Node.js client tests need Node.js and npm: {reason}")


def install(client: Path, npm: str) -> None:
    """Install the client's dependencies as its lockfile pins them."""
    result = run_process(
        [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund"],
        cwd=client,
        capture_output=True,
        text=True,
        timeout=NPM_CI_TIMEOUT,
    )
    if result.returncode != 0:
        unavailable(f"npm ci failed in {client}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")


@pytest.fixture(scope="session")
def node_client() -> Iterator[Node]:
    """Node.js and the reference client, ready to run (skip or fail when missing)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable(f"{'node' if node is None else 'npm'} is not on PATH")
    assert node is not None and npm is not None
    if not (CLIENT / "node_modules" / "ioredis").is_dir():
        install(CLIENT, npm)
    yield Node(node, CLIENT)
