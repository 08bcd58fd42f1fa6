"""Where the clone is: ROOT, the repository's top directory, for every test and helper that
reads a file of the project or starts a process in it (tests, benchmarks and scripts)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
