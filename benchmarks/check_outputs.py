"""Check that a benchmark run wrote its three outputs, with every section in them.

    python benchmarks/check_outputs.py PREFIX     # PREFIX.json, PREFIX.md, PREFIX.png

Used by scripts/bench-smoke (and so by CI) to show that the benchmark command works from a
fresh clone. It judges what was produced, never how fast: the speed targets are the
benchmarks' own verdicts, in the outputs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, too

from benchmarks.run import EXTERNAL, SECTIONS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def problems(prefix: Path) -> list[str]:
    """What is missing or failed in the outputs at ``prefix``; empty when all is there."""
    found = []
    for suffix in (".json", ".md", ".png"):
        if not prefix.with_suffix(suffix).is_file():
            found.append(f"{prefix.with_suffix(suffix)} was not written")
    if found:
        return found
    results = json.loads(prefix.with_suffix(".json").read_text())
    sections = results.get("sections", {})
    found += [f"section {name!r} is missing" for name in SECTIONS if not sections.get(name)]
    external = sections.get("external", {})
    for name in EXTERNAL:
        if "error" in external.get(name, {"error": "missing"}):
            found.append(f"{name}: {external.get(name, {}).get('error', 'missing')}")
    if not results.get("targets"):
        found.append("no target verdicts")
    if "| " not in prefix.with_suffix(".md").read_text():
        found.append("the Markdown has no table")
    if not prefix.with_suffix(".png").read_bytes().startswith(PNG_SIGNATURE):
        found.append("the plot is not a PNG image")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    found = problems(Path(argv[0]))
    for problem in found:
        print(f"[bench-smoke] {problem}", file=sys.stderr)
    if not found:
        print(f"[bench-smoke] {argv[0]}.json, .md and .png written, every section in them")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
