"""The test harness keeps one way to start a process and one ROOT (issue 34): a process a test
or a benchmark starts goes through devkit.processes (start_process, run_process, the
``processes`` fixture), its environment built there (child_env, distlock_variables), and the
clone's top directory is devkit.paths.ROOT, never computed again. The fault suite's
zygote forks its children for speed, and is itself started by start_process."""

from __future__ import annotations

import re

from devkit.paths import ROOT

HELPER = "devkit/processes.py"
# Written as patterns, which this file therefore does not match.
STARTS = re.compile(
    r"\bsubprocess\.(Popen|run|call|check_call|check_output)\("
    r"|\bos\.(system|popen|spawn\w*|exec\w*)\("
    r"|\bcreate_subprocess_(exec|shell)\("
)
# A DISTLOCK_TEST_* variable written for a child: a dict key, a keyword, or an assignment.
BUILDS_ENV = re.compile(
    r"""["']DISTLOCK_TEST_\w+["']\s*:"""
    r"|\bDISTLOCK_TEST_\w+\s*=(?!=)"
    r"""|\[["']DISTLOCK_TEST_\w+["']\]\s*=(?!=)"""
    r"""|setenv\(\s*["']DISTLOCK_TEST_\w+"""
)


def sources(*folders: str) -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for folder in folders
        for path in (ROOT / folder).rglob("*.py")
    }


def offenders(pattern: re.Pattern[str], *folders: str) -> list[str]:
    return sorted(
        f"{name}:{text.count(chr(10), 0, found.start()) + 1}"
        for name, text in sources(*folders).items()
        if name != HELPER
        for found in pattern.finditer(text)
    )


def test_only_the_helper_starts_a_process() -> None:
    assert offenders(STARTS, "tests", "devkit", "benchmarks") == []


def test_only_the_helper_builds_a_childs_distlock_test_variables() -> None:
    assert offenders(BUILDS_ENV, "tests", "devkit", "benchmarks", "scripts") == []


def test_the_helper_starts_and_builds() -> None:
    helper = (ROOT / HELPER).read_text()
    assert STARTS.search(helper) and BUILDS_ENV.search(helper)


def test_root_is_defined_once() -> None:
    defining = [
        name
        for name, text in sources("tests", "devkit", "benchmarks", "scripts").items()
        if re.search(r"^\s*ROOT\s*=", text, re.M)
    ]
    assert defining == ["devkit/paths.py"], defining
