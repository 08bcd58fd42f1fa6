"""What ``scripts/test`` prints around pytest (issue 41): a line of progress while the tests
run (devkit.progress, never silent for minutes), one summary line that counts what
pytest counted (scripts/leg_summary.py: failed and errors apart), and the reverse order CI
runs the whole suite in once (devkit.reverse_order), all on a small suite of its own."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from devkit.paths import ROOT
from devkit.processes import child_env, run_process

SUITE = """
import time

import pytest


@pytest.fixture
def broken_setup():
    raise RuntimeError("setup")


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown")


def test_passes():
    time.sleep(1.5)


def test_fails():
    assert False


def test_errors_in_setup(broken_setup):
    pass


def test_passes_then_errors_in_teardown(broken_teardown):
    pass


def test_fails_then_errors_in_teardown(broken_teardown):
    assert False


@pytest.mark.skip
def test_skipped():
    pass
"""


def pytest_run(tmp_path: Path, *arguments: str, progress: str = "20") -> str:
    suite = tmp_path / "test_small_suite.py"
    suite.write_text(SUITE)
    env = child_env(DISTLOCK_PROGRESS_SECONDS=progress)
    done = run_process(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments, str(suite)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_progress_is_printed_while_a_test_runs(tmp_path: Path) -> None:
    output = pytest_run(tmp_path, "-q", "-p", "devkit.progress", progress="0.3")
    lines = re.findall(r"^\[progress\] 0:0\d: (\d+) of 6 tests done \(.*", output, re.MULTILINE)
    assert lines, output
    assert "running " in output and "test_passes" in output, output


def test_the_summary_line_counts_what_pytest_counted(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    output = pytest_run(tmp_path, "-q", f"--junitxml={junit}")
    said = re.search(r"^(\d+) failed, (\d+) passed, (\d+) skipped, (\d+) errors", output, re.M)
    assert said, output
    failed, passed, skipped, errors = said.groups()
    summary = run_process(
        [sys.executable, "scripts/leg_summary.py", "small", str(junit), "3"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert summary.returncode == 1
    assert (
        f": {passed} passed, {failed} failed, {errors} errors, {skipped} skipped (3 s)"
        in summary.stdout
    ), (output, summary.stdout)


def test_the_reverse_order_plugin_runs_the_last_test_first(tmp_path: Path) -> None:
    forward = pytest_run(tmp_path, "--collect-only", "-q")
    backward = pytest_run(tmp_path, "--collect-only", "-q", "-p", "devkit.reverse_order")
    tests = re.compile(r"^\S+::(test_\w+)$", re.M)
    assert tests.findall(backward) == tests.findall(forward)[::-1] != []
