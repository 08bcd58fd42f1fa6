"""The Lua scripts (distlock/backends/redis_ops/lua/): one file each, every one documented in
one place and in one form (the header a later protocol document and a Node.js client read),
each run by an operation that sends the keys and arguments its header names."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from distlock.backends.base import HANDOFF_GRACE_MS
from distlock.backends.operations import Request
from distlock.backends.redis_ops import grants, holds, listing, semaphores, shared
from distlock.backends.redis_ops.scripts import LOADED, LUA, expand, header
from distlock.backends.redis_ops.steps import Eval, EvalMany, PopThenEval
from distlock.keys import KeyLayout

FOLDER = Path(str(LUA))
SCRIPTS = sorted(path.stem for path in FOLDER.glob("*.lua"))
PARTS = sorted(path.stem for path in FOLDER.glob("include/*.lua"))
PARAMETER = re.compile(r"^-- (KEYS|ARGV)\[(\d+)(?:\.\.(\d+|n))?\]  ")


def test_every_script_file_is_run_by_an_operation() -> None:
    assert sorted(LOADED) == SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_starts_with_its_header(name: str) -> None:
    lines = header((FOLDER / f"{name}.lua").read_text()).splitlines()
    assert re.match(rf"-- {name}\.lua( \(Redlock\))?: \S", lines[0]), lines[0]
    body = lines[lines.index("--") + 1 :]  # after what it does, in a paragraph
    sections = [line[3:].split()[0] for line in body if not line.startswith("--    ")]
    parameters = [section for section in sections if section.startswith(("KEYS", "ARGV"))]
    assert sections == [*parameters, "Reply:", "Effect:"], "KEYS, ARGV, then Reply and Effect"
    for kind in ("KEYS", "ARGV"):
        numbers = [
            int(match[2]) for line in lines if (match := PARAMETER.match(line)) and match[1] == kind
        ]
        assert numbers == list(range(1, len(numbers) + 1)), f"{kind} in order, none left out"


@pytest.mark.parametrize("name", PARTS)
def test_each_included_part_says_what_it_needs(name: str) -> None:
    lines = (FOLDER / "include" / f"{name}.lua").read_text().splitlines()
    assert re.match(rf"-- {name}\.lua \(included(; [\w ]+)?\): \S", lines[0]), lines[0]
    assert any(line.startswith(("-- Needs:", "-- Sets:")) for line in lines)


def test_the_server_gets_each_script_whole() -> None:
    for script in LOADED.values():
        assert "#include" not in script.source
        assert script.source.startswith(f"-- {script.name}.lua")
    assert "local clock = redis.call('TIME')" in LOADED["acquire"].source  # from clock.lua


def test_an_include_circle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.lua").write_text('-- #include "b.lua"\n')
    (tmp_path / "b.lua").write_text('-- #include "a.lua"\n')
    with pytest.raises(ValueError, match="includes itself"):
        expand(tmp_path, '-- #include "a.lua"\n')  # type: ignore[arg-type]


def first_step(steps: Any) -> Any:
    return next(steps)


def every_call() -> list[Eval]:
    """One call of each kind the operations send, with sample values."""
    layout = KeyLayout("test")
    scope: Any = SimpleNamespace(alias="default", layout=layout, max_renewals=3, wait_replicas=0)
    found: list[Eval] = [
        holds.acquire_call(layout, Request("n", "t", 1000, "{}", 0)),
        holds.release_call(layout, "n", "t", every_level=True),
        holds.leave_call(layout, "n", "t"),
        holds.extend_call(layout, "n", "t", 1000, True, False, 3),
        holds.inspect_call(layout, "n"),
        first_step(holds.waiters(scope, "n")),
        *[call for _, call in listing.inspect_many_calls(layout, ["n", "m"])],
        listing.held_names_calls(layout)[0],
        grants.acquire_call(layout, Request("n", "t", 1000, "{}", 0), None),
        grants.release_call(layout, "n", "t", False, suffix="s", vacant=True),
        grants.leave_call(layout, "n", "t"),
        grants.undo_call(layout, "n", "t", 0),
        semaphores.acquire_call(layout, Request("n", "t", 1000, "{}", 0, limit=2)),
        semaphores.release_call(layout, "n", "t"),
        first_step(semaphores.leave(scope, "n", "t")),
        first_step(semaphores.extend(scope, "n", "t", 1000, True)),
        semaphores.inspect_call(layout, "n"),
        first_step(semaphores.held_semaphores(scope, "")).calls[0],
        shared.acquire_call(layout, Request("n", "~t", 1000, "{}", 0)),
        shared.release_call(layout, "n", "~t", every_level=True),
        shared.leave_call(layout, "n", "~t"),
        holds.extend_call(layout, "n", "~t", 1000, True, False, 3, shared.SHARED),
        shared.inspect_call(layout, "n"),
    ]
    waited = first_step(
        holds.acquire_when_free(scope, holds.EXCLUSIVE, Request("n", "t", 1000, "{}", 0), 1.0)
    )
    assert isinstance(waited, PopThenEval)
    found.append(waited.call)
    listed = first_step(listing.held_names(scope, ""))
    assert isinstance(listed, EvalMany)
    return found


def test_every_script_has_a_call_checked_below() -> None:
    assert {call.script.name for call in every_call()} == set(SCRIPTS)


@pytest.mark.parametrize("call", every_call(), ids=lambda call: call.script.name)
def test_each_call_sends_the_keys_and_arguments_its_script_names(call: Eval) -> None:
    script = call.script
    if script.any_keys:
        assert call.keys
    else:
        assert len(call.keys) == len(script.keys), script.keys
    assert script.least_argv <= len(call.args) <= len(script.argv), script.argv


def test_the_exclusive_acquire_and_release_send_the_same_bytes_as_their_str_form() -> None:
    # The hot pair sends its keys and constant arguments encoded once (redis-py would encode
    # them on every call): the server must receive exactly what the str form encodes to.
    layout = KeyLayout("test")
    k = layout.keys_for("caf\u00e9 {x}")
    acquire = holds.acquire_call(layout, Request("caf\u00e9 {x}", "t", 1000, "{}", 0), True)
    release = holds.release_call(layout, "caf\u00e9 {x}", "t", every_level=False)
    assert acquire.keys == tuple(
        key.encode() for key in (k.lock, k.fence, k.waiters, k.live, k.index)
    )
    assert release.keys == tuple(key.encode() for key in (k.lock, k.waiters, k.live, k.index))
    # The name is no key: a str, encoded by the client as in every other call (its encoding).
    assert acquire.args[3] == release.args[1] == "caf\u00e9 {x}"
    assert release.args[2:] == [b"0"]


def test_the_hot_calls_leave_out_what_the_scripts_derive_or_default() -> None:
    # acquire.lua tells by itself whether the token may be queued (ARGV[6]), and the exclusive
    # scripts default the grace: the calls send neither, the scripts' defaults are the grace's.
    layout = KeyLayout("test")
    request = Request("n", "t", 1000, "{}", 0)
    assert len(holds.acquire_call(layout, request, True).args) == 5
    assert len(holds.release_call(layout, "n", "t", every_level=True).args) == 3
    assert len(holds.leave_call(layout, "n", "t").args) == 1
    for name in ("acquire", "release", "leave_queue"):
        assert f"] or '{HANDOFF_GRACE_MS}'" in LOADED[name].source, name
    assert [LOADED[name].least_argv for name in ("acquire", "release", "leave_queue")] == [5, 3, 1]
