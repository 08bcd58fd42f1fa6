"""Print one line for a test leg from pytest's JUnit XML: what it ran on, and its counts.

Usage: leg_summary.py NAME JUNIT_XML SECONDS; exits 1 when the leg failed or ran no test.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from importlib import metadata
from pathlib import Path


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def server_version() -> str:
    from devkit.redis_server import find_redis_server

    binary = find_redis_server()
    output = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    found = (part.split("=", 1)[1] for part in output.stdout.split() if part.startswith("v="))
    return f"{Path(binary).name} {next(found, '?')}"  # redis-server 7.0.15, valkey-server 8.1.8


def count(junit: str) -> Counter[str]:
    """Return what pytest counted in ``junit``: passed, failed, errors and skipped tests.

    As pytest's own summary: a failed setup or teardown is an error, a failed test body a
    failure, and a test whose body passed is passed even when its teardown then failed (one
    test can be counted failed and errored both: JUnit then has two elements for it).
    """
    counts: Counter[str] = Counter()
    outcomes: dict[tuple[str | None, str | None], list[str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        found = outcomes.setdefault((case.get("classname"), case.get("name")), [])
        for child in case:
            if child.tag in {"failure", "error", "skipped"}:
                counts[{"failure": "failed", "error": "errors"}.get(child.tag, child.tag)] += 1
                teardown = child.get("message", "").startswith("failed on teardown")
                found.append("teardown" if child.tag == "error" and teardown else child.tag)
    counts["passed"] = sum(set(found) <= {"teardown"} for found in outcomes.values())
    return counts


def main(name: str, junit: str, seconds: str) -> int:
    counts = count(junit)
    print(
        f"[leg] {name}: Python {platform.python_version()}, Django {version('Django')}, "
        f"redis-py {version('redis')}, hiredis {version('hiredis')}, "
        f"{server_version()}: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['errors']} errors, {counts['skipped']} skipped ({float(seconds):.0f} s)"
    )
    return 1 if counts["failed"] or counts["errors"] or not counts["passed"] else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
