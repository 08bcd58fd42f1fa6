"""The package's layers (docs/architecture.md): the lock core imports no surface, surfaces use
only the core's public names, and the old import paths of the public API still work."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent.parent / "distlock"
CORE = ["lock", "handler", "backends", "exceptions", "info", "names", "validation", "tokens",
        "renewal", "fencing", "signals", "semaphore", "cache"]
SURFACES = ["views", "admin", "naming", "management", "checks", "models", "apps"]


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


@pytest.mark.parametrize(("old", "new", "names"), [
    ("distlock", "distlock.views", ["lock_view"]),
    ("distlock.view_responses", "distlock.views", ["LockContended", "LockServiceUnavailable",
                                                   "wants_json"]),
    ("distlock.view_names", "distlock.naming", ["escape", "compile_template", "DIGEST_MARK"]),
    ("distlock.name_template", "distlock.naming", ["fill_template", "template_fields"]),
    ("distlock.admin", "distlock.admin.options", ["HeldLockAdmin", "format_remaining"]),
    ("distlock.management", "distlock.management.mixin", ["LockedCommandMixin", "LockSkipped"]),
])
def test_old_import_paths_of_the_public_api_still_work(old: str, new: str,
                                                       names: list[str]) -> None:
    for name in names:
        assert getattr(importlib.import_module(old), name) is getattr(
            importlib.import_module(new), name)


def test_the_admin_page_is_registered() -> None:
    from django.contrib import admin
    from django.urls import reverse

    from distlock.models import HeldLock

    assert admin.site.is_registered(HeldLock)
    assert reverse("admin:distlock_heldlock_changelist") == "/admin/distlock/heldlock/"
