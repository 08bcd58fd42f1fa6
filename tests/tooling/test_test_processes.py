"""The test harness keeps one way to start a process and one ROOT (issue 34): a process a
test starts goes through tests.support.processes.start_process (its environment from
child_env), and the clone's top directory is tests.support.paths.ROOT, never computed again."""

from __future__ import annotations

import re

from tests.support.paths import ROOT

TESTS = ROOT / "tests"


def sources() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in TESTS.rglob("*.py")}


POPEN_CALL = "subprocess.Popen" + "("  # in two parts, so that this file does not match


def test_only_start_process_calls_popen() -> None:
    calling = [name for name, text in sources().items() if POPEN_CALL in text]
    assert calling == ["tests/support/processes.py"], calling


def test_root_is_defined_once() -> None:
    defining = [name for name, text in sources().items() if re.search(r"^\s*ROOT\s*=", text, re.M)]
    assert defining == ["tests/support/paths.py"], defining
