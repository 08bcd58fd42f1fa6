"""The sync twins of the async methods are generated (scripts/unasync.py) and current.

This is the CI check: a change to an async source that was not followed by ``make generate``
(or a hand edit of generated code) fails here, naming the file.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

from devkit.paths import ROOT

# distlock.lock the module (``from distlock import lock`` is the function).
lock = importlib.import_module("distlock.lock")
lock_calls = importlib.import_module("distlock.lock_calls")
attempts = importlib.import_module("distlock.attempts")
semaphore = importlib.import_module("distlock.semaphore")
shared = importlib.import_module("distlock.shared")


def load_unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "scripts" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["unasync"] = module  # dataclasses and the like look their module up
    spec.loader.exec_module(module)
    return module


unasync = load_unasync()
MARKED = unasync.marked_files()
PACKAGE = ROOT / "distlock"
# Modules of distlock with async code and no generated twin, and why: each is one of the
# layers' other policies (docs/architecture.md), not a pair written twice.
HAND_WRITTEN_MODULES = {
    "distlock/backends/base.py": "the operator calls' async twins run the sync ones in a thread"
    " (offload.in_thread), as Django's BaseCache does: one body",
    "distlock/backends/operations.py": "every kind's async defaults run the sync operation in a"
    " thread (offload.in_thread): one body; a kind that talks to a server overrides both",
    "distlock/backends/locmem/inmemory.py": "the async wait waits in a thread and acquires on"
    " the loop, so that a task cancelled while it waits takes nothing (the sync one cannot be"
    " cancelled)",
    "distlock/backends/locmem/semaphores.py": "in memory: the async describe calls the sync one",
    "distlock/backends/redis.py": "the async client's life (one per event loop, closed with its"
    " loop): no sync twin",
    "distlock/backends/redis_ops/scripted.py": "the async runs carry give_back, which takes back"
    " a hold granted to a task cancelled in flight; a sync call cannot be cancelled",
    "distlock/backends/redis_ops/fanout.py": "one asyncio task per node where the sync fan-out"
    " sends on each connection, then reads each reply",
    "distlock/fencing.py": "afenced_update runs fenced_update through sync_to_async, as Django's"
    " async QuerySet methods run theirs: one body, one trip to the database thread",
    "distlock/offload.py": "in_thread, the thread-offload helper: the async side only",
    "distlock/contrib/tasks.py": "the task wrapper takes the colour of the task function, in one"
    " method",
    "distlock/transactions.py": "anote_sync_thread asks asgiref which thread a coroutine's ORM"
    " calls go back to (a sync_to_async call); sync code has no such question: its twin,"
    " note_sync_thread, does nothing; so has anote_loop_thread (note_loop_thread)",
    "distlock/views/decorators.py": "an async view reads the user with request.auser() and has no"
    " ATOMIC_REQUESTS transaction to run in: the async path differs from the sync one",
    "distlock/views/request_values.py": "auser_value awaits request.auser(); the sync one reads"
    " request.user",
}
# Async code in a module with generated code, written without a generated twin, and why.
HAND_WRITTEN = {
    # distlock.lock: the decorator picks the colour of the function it wraps, in one method.
    "async_inner": "the decorator's wrapper of a coroutine function, beside the sync one",
    # distlock.cache
    "aget_or_set": "build may be a coroutine function: awaited when it returns an awaitable",
    "astore": "awaits build()'s value when it is awaitable",
    "arefresh_in_background": "a task of the running loop where the sync one starts a thread",
    "_arefresh": "the task's body (the thread's closes its database connections)",
    # distlock.leader
    "await_elected": "waits in a thread (offload.in_thread)",
    "astart": "starts the campaign on the running loop, for coroutine callbacks",
    "astop": "stops the campaign in a thread (offload.in_thread)",
    # distlock.backends.redis_ops.runner
    "async_client": "the client of the running loop: no sync twin",
    "Runner.arun": "give_back, and the async client passed to every step",
    "aexecute": "the async client per step; a Cluster's pipelines run in a thread",
    "aeval": "on the given async client (the sync one routes each call to its node)",
    "aconfirmed": "on the given async client (the sync one follows redirects itself)",
    "apop": "on the given async client",
    "apop_then_eval": "on the given async client",
    "ablocking": "cancellable: asyncio.shield keeps the connection's reply in order",
    "aeval_many": "asyncio.gather over the calls",
    # distlock.backends.redlock
    "_aexecute": "asyncio.sleep where the sync one sleeps",
    "_aask": "one task per node asked (asyncio.gather) where the sync one fans out on sockets",
    # distlock.views.release
    "__anext__": "the async iterator protocol of a streamed response",
    "aclose": "closes the async content first (aclose), which a sync stream has not",
}


def async_modules() -> list[str]:
    """Every module of distlock with async code."""
    return sorted(
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "async def" in path.read_text()
    )


def test_the_modules_with_generated_code() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in MARKED}
    assert names >= {
        "distlock/lock.py",
        "distlock/lock_calls.py",
        "distlock/attempts.py",
        "distlock/semaphore.py",
        "distlock/shared.py",
        "distlock/cache.py",
        "distlock/leader.py",
        "distlock/contrib/task_lock.py",
        "distlock/views/release.py",
        "distlock/backends/redlock.py",
        "distlock/backends/locmem/shared.py",
        "distlock/backends/redis_ops/backend.py",
        "distlock/backends/redis_ops/kinds.py",
        "distlock/backends/redis_ops/runner.py",
        "distlock/backends/redis_ops/steps.py",
    }


def test_every_module_with_async_code_is_generated_or_says_why() -> None:
    marked = {path.relative_to(ROOT).as_posix() for path in MARKED}
    unexplained = [
        name for name in async_modules() if name not in marked | set(HAND_WRITTEN_MODULES)
    ]
    assert not unexplained, (
        f"mark their async sources (scripts/unasync.py), or say why not: {unexplained}"
    )
    both = sorted(marked & set(HAND_WRITTEN_MODULES))
    assert not both, f"generated now: take them out of HAND_WRITTEN_MODULES: {both}"
    gone = sorted(set(HAND_WRITTEN_MODULES) - set(async_modules()))
    assert not gone, f"no async code left: take them out of HAND_WRITTEN_MODULES: {gone}"


def test_every_rename_is_used() -> None:
    assert unasync.unused_renames(MARKED) == []


def test_an_unused_rename_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(unasync.RENAMES, "aforgotten", "forgotten")
    assert unasync.main(["--check"]) == 1
    assert "aforgotten -> forgotten" in capsys.readouterr().err


@pytest.mark.parametrize("path", MARKED, ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_the_generated_code_is_current(path: Path) -> None:
    text = path.read_text()
    generated = unasync.generate(text, path)
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), generated.splitlines(keepends=True), "now", "generated"
        )
    )
    assert generated == text, (
        f"{path.relative_to(ROOT)} is not current: run `make generate`\n{diff}"
    )


@pytest.mark.parametrize("path", MARKED, ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_the_generated_code_compiles(path: Path) -> None:
    compile(unasync.generate(path.read_text(), path), str(path), "exec")


def async_defs_outside_sources(path: Path) -> list[str]:
    """``owner.name`` of each async def of ``path`` outside its unasync sources."""
    lines = path.read_text().splitlines(keepends=True)
    sources = [range(begin, header) for begin, header, _ in unasync.regions(lines)]
    tree = ast.parse("".join(lines))
    outside = []
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.AsyncFunctionDef) and not any(
                child.lineno - 1 in source for source in sources
            ):
                outside.append(f"{getattr(node, 'name', path.stem)}.{child.name}")
    return outside


@pytest.mark.parametrize("path", MARKED, ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_every_async_def_is_a_source_or_says_why_not(path: Path) -> None:
    outside = async_defs_outside_sources(path)
    unexplained = [
        name
        for name in outside
        if name not in HAND_WRITTEN and not set(name.split(".")) & set(HAND_WRITTEN)
    ]
    assert not unexplained, f"write these once, in an unasync region, or say why not: {unexplained}"


def test_every_hand_written_reason_names_async_code() -> None:
    outside = {name for path in MARKED for name in async_defs_outside_sources(path)}
    parts = {part for name in outside for part in name.split(".")}
    stale = sorted(key for key in HAND_WRITTEN if key not in outside | parts)
    assert not stale, f"generated or gone: take them out of HAND_WRITTEN: {stale}"


@pytest.mark.parametrize(
    "owner",
    [
        lock.Lock,
        lock_calls.LockCalls,
        attempts.Attempts,
        attempts,
        semaphore.Semaphore,
        shared,
    ],
    ids=lambda owner: owner.__name__,
)
def test_every_async_method_has_its_sync_twin(owner: object) -> None:
    for name, value in vars(owner).items():
        if not inspect.iscoroutinefunction(value) or getattr(value, "__module__", "") not in (
            "distlock.lock",
            "distlock.lock_calls",
            "distlock.attempts",
            "distlock.semaphore",
            "distlock.shared",
        ):
            continue
        assert name in unasync.RENAMES, (
            f"{name}: add its sync name to RENAMES in scripts/unasync.py"
        )
        twin = getattr(owner, unasync.RENAMES[name], None)
        assert twin is not None, f"{name} has no sync twin {unasync.RENAMES[name]}"
        assert not inspect.iscoroutinefunction(twin), f"{unasync.RENAMES[name]} is async"
        # The same parameters (the annotations differ: Awaitable[X] is X in sync code).
        assert parameters(twin) == parameters(value), name


def parameters(function: object) -> list[tuple[str, object, object]]:
    return [
        (parameter.name, parameter.kind, parameter.default)
        for parameter in inspect.signature(function).parameters.values()
    ]


# --- the rules ------------------------------------------------------------------------------
def test_keywords_go_and_names_are_renamed() -> None:
    source = (
        "async def aacquire(self) -> bool:\n"
        "    async with self.guard:\n"
        "        async for item in self.items():\n"
        "            await self.backend.aleave(item)\n"
        "    return await atake_back(self)\n"
    )
    assert unasync.unasync(source) == (
        "def acquire(self) -> bool:\n"
        "    with self.guard:\n"
        "        for item in self.items():\n"
        "            self.backend.leave(item)\n"
        "    return take_back(self)\n"
    )


def test_strings_and_comments_are_left_alone() -> None:
    source = (
        "async def arelease(self) -> None:\n"
        '    """await arelease() and aacquire()."""\n'
        "    # await self.arelease()\n"
        "    log('aacquire', f'await {self.name}')\n"
    )
    assert unasync.unasync(source) == (
        "def release(self) -> None:\n"
        '    """await arelease() and aacquire()."""\n'
        "    # await self.arelease()\n"
        "    log('aacquire', f'await {self.name}')\n"
    )


@pytest.mark.skipif(sys.version_info < (3, 12), reason="an f-string is one token before 3.12")
def test_a_renamed_name_in_an_f_string_is_refused() -> None:
    # Python 3.12 tokenizes the code in an f-string, 3.11 does not: renaming there would
    # generate different code on different Pythons.
    with pytest.raises(unasync.UnasyncError):
        unasync.unasync("async def arelease(self) -> None:\n    log(f'{self.aacquire}')\n")


def test_an_awaitable_becomes_its_value() -> None:
    source = (
        "async def agive_up(self, leave: Callable[[], Awaitable[dict[str, int]]]) -> None:\n"
        "    pass\n"
    )
    assert unasync.unasync(source) == (
        "def give_up(self, leave: Callable[[], dict[str, int]]) -> None:\n    pass\n"
    )


@pytest.mark.parametrize(
    "source",
    [
        "def acquire(self) -> None:\n    pass\n",  # not async: it would be written twice
        "async def aacquire(self) -> None:\n    await asyncio.sleep(0)\n",  # asyncio's own
    ],
)
def test_what_has_no_sync_twin_is_refused(source: str) -> None:
    with pytest.raises(unasync.UnasyncError):
        unasync.unasync(source)


def test_a_region_without_its_end_is_refused() -> None:
    text = f"class A:\n    {unasync.BEGIN}\n    async def aacquire(self) -> None:\n        pass\n"
    with pytest.raises(unasync.UnasyncError):
        unasync.generate(text, Path("a.py"))
