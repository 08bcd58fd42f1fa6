"""Ruby for the tests that run clients/ruby/ (a client written from docs/protocol.md alone).

``ruby_client`` finds ``ruby`` and checks that it loads redis-rb (Debian: ``ruby-redis``).
Without them the tests that take it skip, saying why; CI installs both (.ci/run) and sets
DISTLOCK_REQUIRE_RUBY, so that there they fail instead of passing without having run.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from devkit.paths import ROOT
from devkit.processes import run_process

CLIENT = ROOT / "clients" / "ruby"
REQUIRE_ENV = "DISTLOCK_REQUIRE_RUBY"


@dataclass(frozen=True)
class Ruby:
    """The ruby binary, and the client's folder."""

    binary: str
    client: Path


def unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{REQUIRE_ENV} is set (CI) but {reason}")
    pytest.skip(f"the Ruby client tests need ruby and redis-rb (Debian: ruby ruby-redis): {reason}")


@pytest.fixture(scope="session")
def ruby_client() -> Ruby:
    """Ruby with redis-rb, ready to run clients/ruby/ (skip or fail when missing)."""
    ruby = shutil.which("ruby")
    if ruby is None:
        unavailable("ruby is not on PATH")
    assert ruby is not None
    found = run_process([ruby, "-e", "require 'redis'"], capture_output=True, text=True, timeout=60)
    if found.returncode != 0:
        unavailable(f"ruby cannot load redis-rb: {found.stderr.strip()[-500:]}")
    return Ruby(ruby, CLIENT)
