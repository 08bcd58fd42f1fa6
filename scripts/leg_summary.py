"""Print one line for a test leg from pytest's JUnit XML: what it ran on, and its counts.

Usage: leg_summary.py NAME JUNIT_XML SECONDS; exits 1 when the leg failed or ran no test.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from importlib import metadata


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def server_version() -> str:
    from tests.support.redis_server import find_redis_server

    output = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True, check=False
    ).stdout
    return next((part.split("=", 1)[1] for part in output.split() if part.startswith("v=")), "?")


def main(name: str, junit: str, seconds: str) -> int:
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ElementTree.parse(junit).getroot()
    for suite in root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    failed = counts["failures"] + counts["errors"]
    passed = counts["tests"] - failed - counts["skipped"]
    print(
        f"[leg] {name}: Python {platform.python_version()}, Django {version('Django')}, "
        f"redis-py {version('redis')}, hiredis {version('hiredis')}, "
        f"redis-server {server_version()}: {passed} passed, {failed} failed, "
        f"{counts['skipped']} skipped ({float(seconds):.0f} s)"
    )
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
