"""The Lua scripts, read from the ``lua/`` folder beside this module when it is imported.

Each script is one file, ``lua/<name>.lua``, that a client in any language loads as it is:

- It starts with a header of ``--`` comments, in one form for every script: a first line
  ``<file>: what it does``, then one line per key and argument (``KEYS[1]  lock  ...``,
  ``ARGV[2]  lease  ...``: the position, a one-word name, what it is; ``KEYS[1..n]`` for any
  number of keys, ``KEYS[1..7]`` for a fixed set documented in another script), and the
  sections ``Reply:`` and ``Effect:``. Continuation lines are indented.
- A line ``-- #include "include/<part>.lua"`` stands for the text of that file, relative to
  the including file (an included part may include others). The parts are fragments shared
  by several scripts; each documents what it needs (``Needs:``) and what it sets
  (``Sets:``). Running a script is sending its text with every include line replaced by the
  included text, as :func:`load` builds it, so every client computes the same SHA1 digest.

An operation loads the scripts it runs with :func:`load` (distlock.backends.redis_ops.holds,
.semaphores, .grants): a new script is its ``.lua`` file and the operation that runs it.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from importlib.resources.abc import Traversable
from typing import NamedTuple

LUA = resources.files(__package__).joinpath("lua")
INCLUDE = re.compile(r'^[ \t]*-- #include "([\w/]+\.lua)"[ \t]*$', re.MULTILINE)
# A key or argument line of a header: KEYS[1] or ARGV[1], KEYS[1..n] (any number) or
# KEYS[1..7] (that many, of one kind), then a one-word name; "optional" first in what it is
# marks an argument a call may leave out (the last ones only).
PARAMETER = re.compile(
    r"^-- (KEYS|ARGV)\[(\d+)(?:\.\.(\d+|n))?\]\s+(\w+)\s+(optional)?", re.MULTILINE
)


class Script(NamedTuple):
    """One Lua script as the server runs it."""

    name: str  # the file's name without .lua
    source: str  # includes expanded
    sha: str  # the SHA1 digest Redis knows the script by (EVALSHA): the same everywhere
    # The same, encoded once (hexadecimal: ASCII in every encoding): what Runner.eval sends,
    # which redis-py then passes on as it is instead of testing and encoding it each call.
    encoded_sha: bytes
    keys: tuple[str, ...]  # the names its header gives KEYS[1], KEYS[2], ...
    argv: tuple[str, ...]  # the names its header gives ARGV[1], ARGV[2], ...
    any_keys: bool  # its header says KEYS[1..n]: any number of keys
    least_argv: int  # the fewest ARGV a call sends: the last ones, marked optional, may go


# Every script loaded so far, by name (the tests check that each file is run by some
# operation, and each header against the calls that operation builds).
LOADED: dict[str, Script] = {}


def load(name: str) -> Script:
    """Return script ``lua/<name>.lua``, its includes expanded."""
    text = LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    source = expand(LUA, text)
    sha = hashlib.sha1(source.encode()).hexdigest()
    parameters = PARAMETER.findall(header(text))
    script = Script(
        name=name,
        source=source,
        sha=sha,
        encoded_sha=sha.encode(),
        keys=_names(parameters, "KEYS"),
        argv=_names(parameters, "ARGV"),
        any_keys=any(kind == "KEYS" and last == "n" for kind, _, last, _, _ in parameters),
        least_argv=_least_argv(parameters),
    )
    LOADED[name] = script
    return script


def _least_argv(parameters: list[tuple[str, str, str, str, str]]) -> int:
    """The count of ARGV before the run of optional ones that ends the header's list."""
    optional = [bool(mark) for kind, _, _, _, mark in parameters if kind == "ARGV"]
    while optional and optional[-1]:
        optional.pop()
    return len(optional)


def _names(parameters: list[tuple[str, str, str, str, str]], kind: str) -> tuple[str, ...]:
    """The names of ``kind`` (KEYS or ARGV) in header order; KEYS[1..7] semaphore gives
    semaphore[1] ... semaphore[7], and KEYS[1..n] locks one name, locks[1..n]."""
    names: list[str] = []
    for found, first, last, label, _ in parameters:
        if found != kind:
            continue
        if not last:
            names.append(label)
        elif last == "n":
            names.append(f"{label}[{first}..n]")
        else:
            names.extend(f"{label}[{i}]" for i in range(int(first), int(last) + 1))
    return tuple(names)


def header(text: str) -> str:
    """Return the comment lines a script file starts with (up to its first include)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--") or INCLUDE.match(line):
            break
        lines.append(line)
    return "\n".join(lines)


def expand(folder: Traversable, text: str, including: tuple[str, ...] = ()) -> str:
    """Return ``text`` (of a file in ``folder``) with each include line replaced by the text
    of the file it names, expanded in turn."""

    def included(match: re.Match[str]) -> str:
        *subfolders, name = match[1].split("/")
        if match[1] in including:
            raise ValueError(f"{match[1]} includes itself: {' -> '.join(including)}")
        where = folder.joinpath(*subfolders) if subfolders else folder
        part = where.joinpath(name).read_text(encoding="utf-8")
        return expand(where, part, (*including, match[1])).rstrip("\n")

    return INCLUDE.sub(included, text)
