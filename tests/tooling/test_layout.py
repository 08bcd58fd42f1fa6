"""The package's layout (docs/architecture.md): every module belongs to the lock core or to a
surface, the core imports no surface, surfaces use only the core's public names, no modules
import each other in a circle, and no module only re-exports another's names. Outside the
package: nothing outside tests/ imports tests.support, and the development infrastructure
(devkit/) imports nothing of tests/."""

from __future__ import annotations

import ast
import importlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from devkit.paths import ROOT

PACKAGE = ROOT / "distlock"
CORE = [
    "lock",
    "lock_calls",
    "attempts",
    "factory",
    "handler",
    "backends",
    "exceptions",
    "info",
    "keys",
    "validation",
    "tokens",
    "renewal",
    "lease",
    "fencing",
    "signals",
    "semaphore",
    "shared",
    "cache",
    "leader",
    "transactions",
    "metrics",
    "eviction",
    "claims",
    "offload",
]
SURFACES = [
    "views",
    "admin",
    "naming",
    "management",
    "checks",
    "models",
    "apps",
    "contrib",
    "migrations",
]


def modules(top: str) -> list[Path]:
    path = PACKAGE / top
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def distlock_imports(path: Path) -> list[tuple[str, list[str]]]:
    """Return (module, names) for each import of a distlock module in ``path``."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.rsplit(".", 1)[0] + ".__init__"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level] if node.level else []
            module = ".".join([*base, node.module or ""]).strip(".")
            found.append((module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return [(module, names) for module, names in found if module.startswith("distlock")]


def top_level(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


@pytest.mark.parametrize("core", CORE)
def test_the_core_imports_no_surface(core: str) -> None:
    for path in modules(core):
        for module, _ in distlock_imports(path):
            assert top_level(module) not in SURFACES, f"{path.name} imports {module}"


@pytest.mark.parametrize("surface", SURFACES)
def test_surfaces_use_only_public_names_of_the_core(surface: str) -> None:
    for path in modules(surface):
        for module, names in distlock_imports(path):
            if top_level(module) in CORE:
                private = [name for name in names if name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {module}"
        source = path.read_text()
        for private_call in ("._holder(", "._aholder(", "._run(", "._arun("):
            assert private_call not in source, f"{path.name} calls {private_call}"


def test_every_module_belongs_to_the_core_or_to_a_surface() -> None:
    found = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    found |= {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert found == set(CORE) | set(SURFACES), "add it to CORE or SURFACES, and to the docs"


@pytest.mark.parametrize(
    ("package", "module", "names"),
    [
        ("distlock", "distlock.views", ["lock_view"]),
        ("distlock.views", "distlock.views.responses", ["LockContended", "LockServiceUnavailable"]),
        ("distlock.naming", "distlock.naming.options", ["fill_template", "template_fields"]),
        ("distlock.admin", "distlock.admin.options", ["HeldLockAdmin"]),
        ("distlock.admin", "distlock.admin.display", ["format_remaining"]),
        ("distlock.management", "distlock.management.mixin", ["LockedCommandMixin", "LockSkipped"]),
    ],
)
def test_packages_re_export_their_public_names(package: str, module: str, names: list[str]) -> None:
    for name in names:
        assert getattr(importlib.import_module(package), name) is getattr(
            importlib.import_module(module), name
        )


# --- no import circles, no re-export shims ----------------------------------------------------
def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Return, for each module of distlock, the distlock modules it imports anywhere in its
    body (functions included: an import deferred to call time still closes a circle).

    ``from package import name`` imports the submodule ``package.name`` when there is one,
    else ``package`` itself.
    """
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    imported.add(submodule if submodule in paths else base)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[name] = {module for module in imported if module in paths and module != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return an import circle through each module that is on one (depth-first search)."""
    found: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        path.append(module)
        for imported in sorted(graph[module]):
            if imported in path:
                found.append([*path[path.index(imported) :], imported])
            elif imported not in done:
                visit(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module)
    return found


def test_the_graph_sees_imports_in_functions_and_from_packages() -> None:
    graph = import_graph()
    assert "distlock.handler" in graph["distlock.lock"]  # from . import handler
    assert "distlock.checks" in graph["distlock.apps"]  # inside ready()
    assert "distlock.naming" in graph["distlock.contrib.task_lock"]  # a package's __init__
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(import_graph()) == []


def only_re_exports(path: Path) -> bool:
    """Return True if the module's body is imports and ``__all__`` (and a docstring) alone:
    a module that only gives another module's names a second address."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    imports = [
        node
        for node in body
        if isinstance(node, ast.Import | ast.ImportFrom)
        and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]
    rest = [
        node
        for node in body
        if node not in imports
        and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
        and not (
            isinstance(node, ast.Assign)
            and [getattr(target, "id", None) for target in node.targets] == ["__all__"]
        )
    ]
    return bool(imports) and not rest


def imports_from_outside(path: Path) -> list[str]:
    """Return what a package's ``__init__`` imports from outside the package."""
    package = module_name(path)
    return [
        module
        for module, _ in distlock_imports(path)
        if module != package and not module.startswith(package + ".")
    ]


def test_no_module_only_re_exports_another() -> None:
    shims = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if not only_re_exports(path):
            continue
        # A package's __init__ may gather its own modules' public names, nothing else.
        if path.name != "__init__.py" or imports_from_outside(path):
            shims.append(str(path.relative_to(PACKAGE.parent)))
    assert shims == []


def test_the_admin_page_is_registered() -> None:
    from django.contrib import admin
    from django.urls import reverse

    from distlock.models import HeldLock

    assert admin.site.is_registered(HeldLock)
    assert reverse("admin:distlock_heldlock_changelist") == "/admin/distlock/heldlock/"


# --- the tests' helpers stay in the tests --------------------------------------------------------
# Directories of the clone that hold no source of ours.
NOT_SOURCE = {"node_modules", "build", "dist", "results", "__pycache__"}
# Files that are not Python but name Python modules to run (-p, -m, DJANGO_SETTINGS_MODULE).
COMMAND_FILES = {"Makefile", "setup.cfg", "pyproject.toml", "ruff.toml"}


def files_outside_tests() -> Iterator[Path]:
    """Every source file of the clone outside tests/: Python, the scripts, CI and configs."""
    for directory, subdirectories, files in os.walk(ROOT):
        here = Path(directory)
        subdirectories[:] = [
            name
            for name in subdirectories
            if name not in NOT_SOURCE
            and not (name.startswith(".") and name != ".ci")
            and not name.endswith(".egg-info")
            and not (here == ROOT and name == "tests")
        ]
        for name in files:
            path = here / name
            if path.suffix == ".py" or name in COMMAND_FILES or here.name in {"scripts", ".ci"}:
                yield path


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Return (line, module) for each module ``path`` imports, and for each string in it that
    is a whole dotted module name (``python -m NAME``, DJANGO_SETTINGS_MODULE, INSTALLED_APPS,
    ``NAME:application``); in a file that is not Python, each dotted name of ``tests``."""
    text = path.read_text(errors="replace")
    if path.suffix != ".py":
        return [
            (text.count("\n", 0, match.start()) + 1, match.group())
            for match in re.finditer(r"\btests(?:\.\w+)+", text)
        ]
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"\w+(\.\w+)+(:\w+)?", node.value)
        ):
            found.append((node.lineno, node.value.split(":")[0]))
    return found


def importers_of(paths: Iterable[Path], prefix: str) -> list[str]:
    return [
        f"{path}:{line} {module}"
        for path in paths
        for line, module in imported_modules(path)
        if module == prefix or module.startswith(prefix + ".")
    ]


def test_nothing_outside_tests_imports_tests_support() -> None:
    # What benchmarks and scripts share with the tests (servers, databases, processes, the
    # proxy, the Django projects) is in devkit/; tests.support is what only tests use.
    files = list(files_outside_tests())
    assert {"benchmarks", "scripts", "devkit", ".ci"} <= {
        path.relative_to(ROOT).parts[0] for path in files
    }
    assert importers_of(files, "tests.support") == [], "move what they use to devkit/"


def test_devkit_imports_nothing_of_the_tests() -> None:
    devkit = [path for path in files_outside_tests() if path.is_relative_to(ROOT / "devkit")]
    assert len(devkit) > 20
    assert importers_of(devkit, "tests") == []


def test_the_import_rule_sees_imports_module_names_and_commands(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        '"""A docstring that names tests.support.paths."""\n'
        "import tests.support.paths\n"
        "from tests.support import processes\n"
        "def f():\n"
        "    from tests.support.redis_server import RedisServer\n"
        "SETTINGS = 'tests.support.settings'\n"
        "APP = 'tests.support.shop.asgi:application'\n"
        "OTHER = ['devkit.settings', 'tests/support/shop']\n"
    )
    script = tmp_path / "run"
    script.write_text("# the whole suite in reverse\npytest -p tests.support.reverse_order\n")
    assert [
        entry.split(":", 1)[1] for entry in importers_of([module, script], "tests.support")
    ] == [
        "2 tests.support.paths",
        "3 tests.support.processes",
        "5 tests.support.redis_server.RedisServer",
        "6 tests.support.settings",
        "7 tests.support.shop.asgi",
        "2 tests.support.reverse_order",
    ]
