"""docs/protocol.md's "Scripts" reference, made from the Lua files' headers, and the check that
the document and the files agree (tests/tooling/test_protocol_doc.py).

The part of the document between ``BEGIN`` and ``END`` is generated: one subsection per script
file, with its KEYS and ARGV as a table, its reply and its effect, in the words of the file's
header (the header is the single source; distlock.backends.redis_ops.scripts reads it too).
After changing a header, or adding a script, run::

    python -m devkit.protocol_doc      # rewrites docs/protocol.md's generated part

A new script is one new subsection, in its group (GROUPS; a name no group claims goes to
"Locks"). The rest of the document is prose, written by hand.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from devkit.paths import ROOT
from distlock.backends.redis_ops.scripts import LUA, header

DOCUMENT = ROOT / "docs" / "protocol.md"
FOLDER = Path(str(LUA))
BEGIN = "<!-- BEGIN SCRIPTS: generated from the .lua headers by python -m devkit.protocol_doc -->"
END = "<!-- END SCRIPTS -->"
# A parameter line of a header: KEYS[1], ARGV[2], KEYS[1..n], KEYS[1..7], then its name.
PARAMETER = re.compile(r"^(KEYS|ARGV)\[(\d+(?:\.\.(?:\d+|n))?)\]\s+(\w+)\s*(.*)$")
# A parameter row of the document's tables: | `ARGV[2]` | `lease` | ...
ROW = re.compile(r"^\| `(KEYS|ARGV)\[([^\]]+)\]` \| `(\w+)` \|", re.MULTILINE)
HEADING = re.compile(r"^#### `(\w+)\.lua`", re.MULTILINE)
# (group title, what it is for, its scripts in reading order; a script matching no group is
# a lock script)
GROUPS: list[tuple[str, str, list[str]]] = [
    (
        "Locks",
        "The scripts a client of one server or a Cluster runs (the Node.js client runs these).",
        ["acquire", "release", "leave_queue", "extend", "inspect", "waiters"],
    ),
    ("Listings", "What `distlock list` and the admin read.", ["held_names", "inspect_many"]),
    (
        "Semaphores",
        "Permits of a semaphore; its seven keys are listed once, by `semaphore_acquire.lua`.",
        [
            "semaphore_acquire",
            "semaphore_release",
            "semaphore_leave",
            "semaphore_extend",
            "semaphore_inspect",
            "semaphore_held_names",
        ],
    ),
    (
        "Shared locks",
        "Shared holds (readers) of a lock; the exclusive scripts above see them as described "
        "under [Shared locks](#shared-locks).",
        ["shared_acquire", "shared_release", "shared_extend", "shared_leave", "shared_inspect"],
    ),
    (
        "Redlock nodes",
        "Run on each node of a RedlockBackend (extend, inspect and listings are the ones above).",
        ["grant_acquire", "grant_release", "grant_leave_queue", "undo_acquire"],
    ),
]


@dataclass(frozen=True)
class Parameter:
    kind: str  # KEYS or ARGV
    position: str  # "1", "1..n", "1..7"
    name: str
    text: str


@dataclass(frozen=True)
class Header:
    name: str
    summary: str
    parameters: tuple[Parameter, ...]
    reply: str
    effect: str


def read_header(path: Path) -> Header:
    """Return the documented parts of the script file at ``path``."""
    lines = [
        line[3:] if line.startswith("-- ") else "" for line in header(path.read_text()).splitlines()
    ]
    paragraphs: list[list[str]] = []  # each parameter or section with its continuation lines
    for line in lines:
        if line.startswith(" ") and paragraphs:
            paragraphs[-1].append(line.strip())
        elif line:
            paragraphs.append([line.strip()])
    first, *rest = (" ".join(paragraph) for paragraph in paragraphs)
    summary = first.split(": ", 1)[1]
    parameters, sections = [], {}
    for paragraph in rest:
        if match := PARAMETER.match(paragraph):
            parameters.append(Parameter(*match.groups()))
        elif paragraph.startswith(("Reply:", "Effect:")):
            title, text = paragraph.split(":", 1)
            sections[title] = text.strip()
        else:  # the summary continues
            summary += " " + paragraph
    return Header(path.stem, summary, tuple(parameters), sections["Reply"], sections["Effect"])


def headers(folder: Path = FOLDER) -> dict[str, Header]:
    return {path.stem: read_header(path) for path in sorted(folder.glob("*.lua"))}


def render(found: dict[str, Header]) -> str:
    """Return the generated part of the document (between BEGIN and END, exclusive)."""
    grouped = {name for _, _, names in GROUPS for name in names}
    out: list[str] = []
    for title, about, names in GROUPS:
        extra = sorted(n for n in found if n not in grouped) if title == "Locks" else []
        out += [f"### {title}", "", about, ""]
        for name in [n for n in names if n in found] + extra:
            out += render_script(found[name])
    return "\n".join(out).strip("\n")


def render_script(script: Header) -> list[str]:
    rows = [
        f"| `{p.kind}[{p.position}]` | `{p.name}` | {cell(p.text)} |" for p in script.parameters
    ]
    table = ["| | name | what it is |", "|---|---|---|", *rows, ""] if rows else []
    return [
        f"#### `{script.name}.lua`",
        "",
        script.summary[0].upper() + script.summary[1:],
        "",
        *table,
        f"**Reply:** {script.reply}",
        "",
        f"**Effect:** {script.effect}",
        "",
    ]


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def generated_part(document: str) -> str:
    return document.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def disagreements(document: str, folder: Path = FOLDER) -> list[str]:
    """Return every way ``document`` and the script files in ``folder`` disagree: a script
    without its subsection (or the converse), and each KEYS/ARGV of a header missing from its
    subsection's table (or the converse), by position and name."""
    found = headers(folder)
    sections = dict(zip(HEADING.findall(document), HEADING.split(document)[2::2], strict=True))
    problems = [f"{name}.lua has no section in the document" for name in found.keys() - sections]
    problems += [
        f"the document describes {name}.lua, which is no file" for name in sections.keys() - found
    ]
    for name in sorted(found.keys() & sections.keys()):
        in_file = {(p.kind, p.position, p.name) for p in found[name].parameters}
        in_document = set(ROW.findall(sections[name]))
        for kind, position, label in sorted(in_file - in_document):
            problems.append(f"{name}.lua: {kind}[{position}] {label} is not documented")
        for kind, position, label in sorted(in_document - in_file):
            problems.append(
                f"{name}.lua: the document has {kind}[{position}] {label}, not the file"
            )
    return problems


def rewrite(path: Path = DOCUMENT) -> bool:
    """Rewrite the generated part of ``path``; return True if it changed."""
    document = path.read_text()
    before, rest = document.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    new = f"{before}{BEGIN}\n\n{render(headers())}\n\n{END}{after}"
    path.write_text(new)
    return new != document


if __name__ == "__main__":
    changed = rewrite()
    print(f"{DOCUMENT.relative_to(ROOT)}: {'rewritten' if changed else 'already up to date'}")
    sys.exit(0)
