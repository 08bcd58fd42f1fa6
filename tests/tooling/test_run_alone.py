"""Tests that ask for a database of their own must also pass when run alone, by node id: a
database set up on its own must not depend on one that is not (Django's TEST[DEPENDENCIES]).
Each is run in a pytest process of its own, as a developer would rerun a failing test."""

from __future__ import annotations

import sys

import pytest

from devkit.paths import ROOT
from devkit.processes import run_process

# Every test that sets up only the "fencing" database (databases=["fencing"]).
ALONE = [
    "tests/faults/test_fencing.py::test_an_auto_renewed_holder_paused_past_its_lease_learns_it_lost",
    "tests/faults/test_fencing.py::test_a_paused_expired_holders_late_write_is_rejected[extend]",
]


@pytest.mark.parametrize("node_id", ALONE, ids=lambda node_id: node_id.rsplit("::", 1)[1][:40])
def test_runs_alone_by_node_id(node_id: str) -> None:
    done = run_process(
        [sys.executable, "-m", "pytest", node_id, "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:]
