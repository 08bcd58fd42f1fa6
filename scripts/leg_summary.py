"""Print one line for a test leg from pytest's JUnit XML: what it ran on, and its counts.

Usage: leg_summary.py NAME JUNIT_XML SECONDS; exits 1 when the leg failed or ran no test.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from importlib import metadata
from pathlib import Path


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def server_version() -> str:
    from tests.support.redis_server import find_redis_server

    binary = find_redis_server()
    output = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    found = (part.split("=", 1)[1] for part in output.stdout.split() if part.startswith("v="))
    return f"{Path(binary).name} {next(found, '?')}"  # redis-server 7.0.15, valkey-server 8.1.8


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
        f"{server_version()}: {passed} passed, {failed} failed, "
        f"{counts['skipped']} skipped ({float(seconds):.0f} s)"
    )
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
