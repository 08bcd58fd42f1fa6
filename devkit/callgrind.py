"""A Python program run under callgrind, its instruction counts read back: the count that
the machine's load does not move (benchmarks/cost_instructions.py, cost_pair.py).

The program marks its phases by calling ``os.getppid()``: callgrind dumps its counts before
each such call (``--dump-before=getppid``), so the totals come back one per dump, in order
(the first covers start-up; the last, anything after the last mark).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from devkit.paths import ROOT
from devkit.processes import run_process

TOTAL = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)


def dump_totals(arguments: list[str], env: dict[str, str], cwd: Path = ROOT) -> list[int]:
    """Run ``python arguments...`` under callgrind; return the instructions of each dump."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        run_process(
            [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getppid",
                f"--callgrind-out-file={out}",
                sys.executable,
                *arguments,
            ],
            env=env,
            check=True,
            capture_output=True,
            cwd=cwd,
        )
        parts = sorted(out.parent.glob("callgrind.out.*"), key=lambda path: int(path.suffix[1:]))
        totals = []
        for part in parts:
            found = TOTAL.search(part.read_text())
            assert found, part
            totals.append(int(found.group(1)))
    return totals
