"""Fixtures that several test modules share live in a conftest.py (tests/conftest.py, or the
folder's), where pytest finds them: no test module imports a fixture from another test module,
by name or through the module (``shop = other.shop``), and no conftest.py imports from a test
module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from devkit.paths import ROOT

TESTS = ROOT / "tests"


@pytest.fixture
def example_fixture() -> int:
    """A fixture of this module, for the rule's own test to find borrowed (no test takes it)."""
    return 1


def module_path(module: str) -> Path | None:
    """The file of ``tests.x.test_y``, if ``module`` names a test module."""
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    return path if path.name.startswith("test_") and path.is_file() else None


def fixtures(path: Path) -> set[str]:
    """The names of the fixtures ``path`` defines (``@pytest.fixture``, with or without
    arguments)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if ast.unparse(target) in ("pytest.fixture", "fixture"):
                    found.add(node.name)
    return found


def borrowed(path: Path) -> list[str]:
    """Return ``module.name`` for each fixture ``path`` takes from a test module; for a
    conftest.py, each name it imports from a test module at all."""
    tree = ast.parse(path.read_text())
    conftest = path.name == "conftest.py"
    found = []
    aliases: dict[str, Path] = {}  # a test module imported whole, by its local name
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                whole = module_path(f"{node.module}.{alias.name}")
                if whole is not None:
                    aliases[alias.asname or alias.name] = whole
                    if conftest:
                        found.append(f"{node.module}.{alias.name}")
                    continue
                source = module_path(node.module)
                if source is not None and (conftest or alias.name in fixtures(source)):
                    found.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                whole = module_path(alias.name)
                if whole is not None:
                    aliases[alias.asname or alias.name] = whole
                    if conftest:
                        found.append(alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr in fixtures(aliases[node.value.id])
        ):
            found.append(f"{aliases[node.value.id].stem}.{node.attr}")
    return found


def test_no_test_module_imports_a_fixture_of_another() -> None:
    modules = sorted(TESTS.rglob("test_*.py")) + sorted(TESTS.rglob("conftest.py"))
    assert len(modules) > 100
    found = [f"{path.relative_to(ROOT)}: {name}" for path in modules for name in borrowed(path)]
    assert found == [], "move the fixture to the conftest.py of the folder (or tests/conftest.py)"


def test_the_rule_sees_each_way_of_borrowing(tmp_path: Path) -> None:
    folder = ROOT / "tests" / "tooling"
    this = "tests.tooling.test_fixture_homes"
    borrower = tmp_path / "test_borrower.py"
    borrower.write_text(
        f"from {this} import TESTS, fixtures\n"  # not fixtures: allowed
        "from tests.tooling import test_fixture_homes as homes\n"
        "example = homes.example_fixture\n"
        f"from {this} import example_fixture\n"
    )
    conftest = tmp_path / "conftest.py"
    conftest.write_text(f"from {this} import TESTS\n")
    assert (folder / "test_fixture_homes.py").is_file()
    assert borrowed(borrower) == [
        f"{this}.example_fixture",
        "test_fixture_homes.example_fixture",
    ]
    assert borrowed(conftest) == [f"{this}.TESTS"]
