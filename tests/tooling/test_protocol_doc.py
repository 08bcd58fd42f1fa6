"""docs/protocol.md against the Lua files it documents (issue 26): every script has its
subsection, every KEYS[n] and ARGV[n] of a header is in its subsection's table and nothing
else is, and the generated part is what the headers give now."""

from __future__ import annotations

import shutil
from pathlib import Path

from devkit.protocol_doc import (
    DOCUMENT,
    FOLDER,
    disagreements,
    generated_part,
    headers,
    render,
)
from distlock.keys import LAYOUT_VERSION

TEXT = DOCUMENT.read_text()


def test_the_document_and_the_script_files_agree() -> None:
    assert disagreements(TEXT) == []


def test_the_scripts_section_is_generated_from_the_headers_as_they_are() -> None:
    assert generated_part(TEXT) == render(headers()), (
        "a Lua header changed: run python -m devkit.protocol_doc"
    )


def test_the_document_names_the_layout_version_the_code_has() -> None:
    assert TEXT.startswith(f"# The distlock protocol, version {LAYOUT_VERSION}\n")


def with_fake_argument(tmp_path: Path) -> Path:
    """Copy the lua folder, with an ARGV[7] in acquire.lua's header that the document lacks."""
    folder = tmp_path / "lua"
    shutil.copytree(FOLDER, folder)
    script = folder / "acquire.lua"
    lines = script.read_text().splitlines(keepends=True)
    last_argv = max(i for i, line in enumerate(lines) if line.startswith("-- ARGV["))
    lines.insert(last_argv + 1, "-- ARGV[7]  deadline  ms after which nobody may wait\n")
    script.write_text("".join(lines))
    return folder


def test_the_check_fails_when_a_script_gains_an_undocumented_argument(tmp_path: Path) -> None:
    folder = with_fake_argument(tmp_path)
    assert disagreements(TEXT, folder) == ["acquire.lua: ARGV[7] deadline is not documented"]
    # and the generated part, made again from the changed header, would no longer match
    assert render(headers(folder)) != generated_part(TEXT)


def test_the_check_fails_when_the_document_has_an_argument_the_file_lacks() -> None:
    extra = TEXT.replace(
        "| `ARGV[2]` | `grace` | optional: ms the next waiter",
        "| `ARGV[3]` | `ghost` | nothing |\n| `ARGV[2]` | `grace` | optional: ms the next waiter",
    )
    assert extra != TEXT
    assert disagreements(extra) == ["leave_queue.lua: the document has ARGV[3] ghost, not the file"]


def test_the_check_fails_for_a_script_without_a_section(tmp_path: Path) -> None:
    folder = tmp_path / "lua"
    shutil.copytree(FOLDER, folder)
    shutil.copy(folder / "inspect.lua", folder / "peek.lua")
    assert disagreements(TEXT, folder) == ["peek.lua has no section in the document"]
    # The generator gives it its subsection (in "Locks", where a script no group claims goes).
    assert "#### `peek.lua`" in render(headers(folder))
