#!/usr/bin/env python3
"""Write the sync twins of distlock's async methods from the async ones (as httpcore does).

A module marks each piece of async source, and the place of its generated sync twin, with
three comment lines at the indentation of the code (a class body, or the module's top level):

    # unasync: the async source of the sync code after it
    async def aacquire(self, ...) -> bool: ...
    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def acquire(self, ...) -> bool: ...
    # unasync: end

Only ``async def`` statements may stand in a source block. The rewrite is token by token
(``tokenize``), so strings and comments are never touched:

- ``async def`` / ``async with`` / ``async for`` lose ``async``; ``await x`` becomes ``x``;
- ``Awaitable[X]`` becomes ``X`` (a callable that returns X);
- every name in RENAMES is replaced, wherever it stands as a name (a method, an attribute,
  a function); one inside an f-string is refused (Pythons before 3.12 do not tokenize it);
- a source block that names ``asyncio`` is refused: code that differs by colour in more than
  these rules stays out of the generated pair, written twice, with a comment saying why.

The file is then formatted with ``ruff format`` (removing ``await`` can let a wrapped call fit
on one line). ``python scripts/unasync.py`` rewrites the files; ``--check`` only reports the
files that are not current (tests/tooling/test_generated_sync.py does that in CI). Either way
the run fails, naming them, when a rule of RENAMES renames nothing: a name no async source
uses any more is a rule to remove (or a source that lost its marker comments).

It imports only the standard library and devkit (paths, processes), never the tests.
"""

from __future__ import annotations

import ast
import io
import shutil
import sys
import textwrap
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports

from devkit.paths import ROOT
from devkit.processes import run_process

PACKAGE = ROOT / "distlock"
BEGIN = "# unasync: the async source of the sync code after it"
HEADER = (
    "# Generated from the async source above by scripts/unasync.py: do not edit; "
    "run `make generate`."
)
END = "# unasync: end"
# Each async name and its sync twin. A name not listed stays as it is.
RENAMES = {
    # distlock.lock_calls.LockCalls (distlock.lock.Lock's calls) and distlock.lock.Lock;
    # distlock.attempts, the acquire path (its aacquire and _areenter, Attempts.aacquire)
    "aacquire": "acquire",
    "anote_sync_thread": "note_sync_thread",
    "anote_loop_thread": "note_loop_thread",
    "_areenter": "_reenter",
    "arelease": "release",
    "_arelease_now": "_release_now",
    "aextend": "extend",
    "alocked": "locked",
    "aowned": "owned",
    "aholder": "holder",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    # distlock.attempts: taking back a waiting release, and Attempts
    "atake_back": "take_back",
    "atake_back_from_queue": "take_back_from_queue",
    "aguarded": "guarded",
    "_aabandon": "_abandon",
    "_aforget_maybe_granted": "_forget_maybe_granted",
    "agive_up": "give_up",
    # distlock.shared
    "arefuse_upgrade": "refuse_upgrade",
    # distlock.cache._Plan (and Django's async cache API: BaseCache.aget)
    "arebuild": "rebuild",
    "aread": "read",
    "astore": "store",
    "abuild_missing": "build_missing",
    "abuild_now": "build_now",
    "aget": "get",
    # distlock.backends.redis_ops: steps.drive, runner's BLPOP helpers, Redlock's run
    "adrive": "drive",
    "anudge": "nudge",
    "aread_reply": "read_reply",
    "arun": "run",
    "_aexecute": "_execute",
    # distlock.leader.Leader
    "astart": "start",
    "astop": "stop",
    # distlock.contrib.task_lock, distlock.views.release
    "arelease_quietly": "release_quietly",
    "aafter": "after",
    # the operations of a kind that the lock calls (distlock.backends.operations)
    "atry_acquire": "try_acquire",
    "aacquire_when_free": "acquire_when_free",
    "aleave": "leave",
    "ainspect": "inspect",
    "adescribe": "describe",
    # distlock.backends.redis_ops.backend.ScriptedBackend
    "ainfo": "info",
}
REFUSED = {"asyncio"}
# Python 3.12's f-string tokens (-1: none before 3.12, where an f-string is one STRING token).
FSTRING_START = getattr(tokenize, "FSTRING_START", -1)
FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


class UnasyncError(Exception):
    """A source block the rules cannot turn into sync code."""


def unasync(source: str) -> str:
    """Return the sync twin of ``source`` (a dedented block of ``async def`` statements)."""
    check_source(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def at(position: tuple[int, int]) -> int:
        return offsets[position[0] - 1] + position[1]

    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in ``source``
    in_f_string = 0
    for index, token in enumerate(tokens):
        in_f_string += {FSTRING_START: 1, FSTRING_END: -1}.get(token.type, 0)
        if token.type != tokenize.NAME:
            continue
        if in_f_string and token.string in RENAMES:
            # Python 3.12 tokenizes the code in an f-string and 3.11 does not: renaming
            # there would generate different code on different Pythons.
            raise UnasyncError(f"line {token.start[0]}: {token.string} in an f-string")
        following = tokens[index + 1]
        keyword = token.string == "async" and following.string in ("def", "with", "for")
        if keyword or token.string == "await":  # drop the word and the space after it
            edits.append((at(token.start), at(following.start), ""))
        elif token.string == "Awaitable" and following.string == "[":
            closing = matching_bracket(tokens, index + 1)
            edits.append((at(token.start), at(following.end), ""))
            edits.append((at(closing.start), at(closing.end), ""))
        elif token.string in REFUSED:
            raise UnasyncError(f"line {token.start[0]}: {token.string} has no sync twin")
        elif token.string in RENAMES:
            edits.append((at(token.start), at(token.end), RENAMES[token.string]))
    result = source
    for start, end, replacement in sorted(edits, reverse=True):
        result = result[:start] + replacement + result[end:]
    return result


def check_source(source: str) -> None:
    for node in ast.parse(source).body:
        if not isinstance(node, ast.AsyncFunctionDef):
            raise UnasyncError(f"line {node.lineno}: only async def statements may be the source")


def matching_bracket(tokens: list[tokenize.TokenInfo], opening: int) -> tokenize.TokenInfo:
    depth = 0
    for token in tokens[opening:]:
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
            if depth == 0:
                return token
    raise UnasyncError("an Awaitable[ without its closing bracket")


def regions(lines: list[str]) -> list[tuple[int, int, int]]:
    """Return (begin, header, end) line indexes of each marked region of a module."""
    found = []
    begin = header = None
    for number, line in enumerate(lines):
        text = line.strip()
        if text == BEGIN and begin is None:
            begin = number
        elif text == HEADER and begin is not None and header is None:
            header = number
        elif text == END and begin is not None and header is not None:
            found.append((begin, header, number))
            begin = header = None
        elif text in (BEGIN, HEADER, END):
            raise UnasyncError(f"line {number + 1}: {text!r} out of order")
    if begin is not None:
        raise UnasyncError(f"line {begin + 1}: a region without its {HEADER!r} and {END!r}")
    return found


def generate(text: str, path: Path) -> str:
    """Return the module ``text`` with each generated region written anew, formatted."""
    lines = text.splitlines(keepends=True)
    for begin, header, end in reversed(regions(lines)):
        indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
        source = textwrap.dedent("".join(lines[begin + 1 : header]))
        try:
            sync = unasync(source)
        except UnasyncError as exc:
            raise UnasyncError(f"{path.name}, the region at line {begin + 1}: {exc}") from None
        twin = textwrap.indent(sync, indent, lambda line: bool(line.strip()))
        lines[header + 1 : end] = [twin.rstrip("\n") + "\n\n"]
    return ruff_format("".join(lines), path)


def ruff_format(text: str, path: Path) -> str:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        raise UnasyncError("ruff is not installed: the generated code is formatted by it")
    done = run_process(
        [ruff, "format", "--stdin-filename", str(path), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise UnasyncError(f"ruff format failed on {path}: {done.stderr}")
    return done.stdout


def marked_files() -> list[Path]:
    """Every module of distlock with a generated region."""
    return sorted(path for path in PACKAGE.rglob("*.py") if BEGIN in path.read_text())


def renamed_names(text: str) -> set[str]:
    """The names of RENAMES that stand as a name in the async sources of module ``text``."""
    lines = text.splitlines(keepends=True)
    found = set()
    for begin, header, _ in regions(lines):
        source = textwrap.dedent("".join(lines[begin + 1 : header]))
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and token.string in RENAMES:
                found.add(token.string)
    return found


def unused_renames(paths: list[Path]) -> list[str]:
    """The rules of RENAMES that rename nothing in the async sources of ``paths``."""
    used = set().union(*(renamed_names(path.read_text()) for path in paths))
    return [f"{name} -> {RENAMES[name]}" for name in RENAMES if name not in used]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    paths = marked_files()
    for path in paths:
        text = path.read_text()
        generated = generate(text, path)
        if generated != text:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(generated)
    for path in stale:
        print(f"{path}: {'not current; run `make generate`' if check else 'generated anew'}")
    unused = unused_renames(paths)
    if unused:
        print(
            f"scripts/unasync.py: {len(unused)} rule(s) of RENAMES rename nothing in the async"
            f" sources of {len(paths)} marked module(s): {', '.join(unused)}. Remove them from"
            " RENAMES, or mark the async source that needs them (see this file's docstring).",
            file=sys.stderr,
        )
        return 1
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
