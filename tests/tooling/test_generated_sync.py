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
# Async code written without a generated twin, and why.
HAND_WRITTEN = {
    # The decorator picks the colour of the function it wraps, in one method.
    "async_inner": "the decorator's wrapper of a coroutine function, beside the sync one",
}


def test_the_modules_with_generated_code() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in MARKED}
    assert names >= {"distlock/lock.py", "distlock/semaphore.py", "distlock/shared.py"}


@pytest.mark.parametrize("path", MARKED, ids=lambda path: path.name)
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


@pytest.mark.parametrize("path", MARKED, ids=lambda path: path.name)
def test_the_generated_code_compiles(path: Path) -> None:
    compile(unasync.generate(path.read_text(), path), str(path), "exec")


@pytest.mark.parametrize("path", MARKED, ids=lambda path: path.name)
def test_every_async_def_is_a_source_or_says_why_not(path: Path) -> None:
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
    unexplained = [name for name in outside if not set(name.split(".")) & set(HAND_WRITTEN)]
    assert not unexplained, f"write these once, in an unasync region, or say why not: {unexplained}"


@pytest.mark.parametrize(
    "owner",
    [lock.Lock, lock._Attempts, semaphore.Semaphore, shared],
    ids=lambda owner: owner.__name__,
)
def test_every_async_method_has_its_sync_twin(owner: object) -> None:
    for name, value in vars(owner).items():
        if not inspect.iscoroutinefunction(value) or getattr(value, "__module__", "") not in (
            "distlock.lock",
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
        "    return await self._atake_back(self)\n"
    )
    assert unasync.unasync(source) == (
        "def acquire(self) -> bool:\n"
        "    with self.guard:\n"
        "        for item in self.items():\n"
        "            self.backend.leave(item)\n"
        "    return self._take_back(self)\n"
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
