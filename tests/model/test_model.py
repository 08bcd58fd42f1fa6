"""The protocol model checker in CI (tests/model/__init__.py): every configuration PASSes at
its depth, every mutant of the scripts is caught, and the drift rule before issue 44 is
caught in the clock-rate configuration. Deterministic: the clock is virtual."""

from __future__ import annotations

import pytest

from devkit.paths import ROOT

from .config import CONFIGS, no_discard, rate
from .explorer import Explorer
from .mutants import MUTANTS, Mutant

pytestmark = pytest.mark.timeout(900)  # the deepest configuration takes a minute or two


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_state_keeps_the_promises(name: str) -> None:
    config = CONFIGS[name]
    result = Explorer(config).run(config.depth)
    print(result)
    assert result.finding is None, f"{result}\n{result.finding}"
    assert result.states > 1000  # it explored, not stopped at the first step


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.edit.file for m in MUTANTS])
def test_the_checker_catches_each_mutant_of_the_scripts(mutant: Mutant) -> None:
    config = CONFIGS[mutant.config]
    result = Explorer(config, mutant.edit).run(config.depth)
    assert result.finding is not None, f"mutant not caught: {mutant.name} ({result})"
    print(f"mutant caught: {mutant.name}\n{result.finding}")


def test_the_drift_rule_before_issue_44_lets_a_slow_waiter_believe_it_holds() -> None:
    """START = max(t_send, t0 + (ACQUIRED_MS - NOW0) - 1): a waiter whose clock runs 1% slow
    believes it holds after the server's lease ended."""
    config = rate("old")
    result = Explorer(config).run(config.depth)
    assert result.finding is not None
    print(result.finding)
    assert "client B (exclusive) believes it holds" in result.finding.problems[0]


def test_a_cancel_that_keeps_the_pending_pipeline_open_leaves_an_orphan_hold() -> None:
    """Without the error path's MUST (discard the connection of a pending BLPOP + EVALSHA),
    the abandoned acquire runs after the error path and takes the lock for nobody."""
    config = no_discard()
    result = Explorer(config).run(config.depth)
    assert result.finding is not None
    print(result.finding)
    assert "which client B gave up on" in result.finding.problems[0]


def test_fakeredis_is_used_by_the_model_checker_alone() -> None:
    """Every other test runs against real servers."""
    users = [
        path.relative_to(ROOT)
        for folder in ("distlock", "tests", "benchmarks", "testproject", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if "fakeredis" in path.read_text(encoding="utf-8") and "tests/model" not in path.as_posix()
    ]
    assert users == []
