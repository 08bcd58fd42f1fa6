"""The public API of distlock is what the last release (5f7026b) exported: every public name of
the package and of its documented modules (docs: /work/shared/CONTRACT.md), with the signature
of every public callable and of every public method of a public class.

public_api.json was recorded from the untouched tree of that release; a refactoring (the
generated sync methods of the Lock, the backends' operations objects) must leave it as it is.
To record it again after a deliberate, documented change of the API:
``python -m tests.tooling.test_public_api > tests/tooling/public_api.json``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

RECORD = Path(__file__).with_name("public_api.json")
MODULES = [
    "distlock",
    "distlock.lock",
    "distlock.semaphore",
    "distlock.cache",
    "distlock.leader",
    "distlock.views",
    "distlock.management",
    "distlock.contrib.celery",
    "distlock.contrib.tasks",
    "distlock.exceptions",
    "distlock.info",
    "distlock.signals",
    "distlock.backends.base",
    "distlock.backends.redis",
    "distlock.backends.redlock",
    "distlock.backends.django_redis",
    "distlock.backends.locmem",
]
# A backend's contract (CONTRACT.md, "Introspection"); its per-kind internals (try_acquire,
# semaphore_acquire, shared_holders, leave_queue, held_names, ...) are being replaced by one
# operations object per kind and are not part of the public API.
BACKEND_METHODS = {
    "held",
    "aheld",
    "info",
    "ainfo",
    "force_release",
    "aforce_release",
    "iter_held",
    "count",
    "locked",
}
# Internal plumbing that the per-kind operations objects replace (neither is in the contract):
# the adapter that showed a semaphore's permits as a lock's primitives, and the helper that
# returned the backend for them (now its semaphore operations).
INTERNAL = {"distlock.semaphore.Permits"}
BACKEND_MODULES = {name for name in MODULES if name.startswith("distlock.backends.")}
# The special methods that are API: making, calling, ``with`` and ``async with``.
DUNDERS = {"__init__", "__call__", "__enter__", "__exit__", "__aenter__", "__aexit__"}
# Reprs that change from one run to the next (a sentinel's address).
ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def signature(obj: Any) -> str | None:
    try:
        return ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):  # a builtin without a signature
        return None


def public_names(module: Any) -> list[str]:
    """The module's ``__all__``, else the public names it defines itself."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and getattr(value, "__module__", None) == module.__name__
            and (inspect.isclass(value) or inspect.isfunction(value))
        ]
    return sorted(name for name in names if f"{module.__name__}.{name}" not in INTERNAL)


def methods(cls: type, module: str) -> dict[str, str | None]:
    """Every public method (inherited ones too) of ``cls`` with its signature."""
    found = {}
    for name in dir(cls):
        if name.startswith("_") and name not in DUNDERS:
            continue
        owner = next(klass for klass in cls.__mro__ if name in vars(klass))
        if owner.__module__ == "builtins":  # add_note, with_traceback: Python's, not ours
            continue
        if module in BACKEND_MODULES and name not in BACKEND_METHODS | {"__init__"}:
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, staticmethod | classmethod):
            value = getattr(cls, name)
        if callable(value) and not inspect.isclass(value):
            found[name] = signature(value)
    return found


def describe(value: Any, module: str) -> dict[str, Any]:
    if inspect.isclass(value):
        return {"class": True, "methods": methods(value, module)}
    if callable(value):
        return {"signature": signature(value)}
    return {"type": type(value).__name__}


@pytest.mark.parametrize("module", MODULES)
def test_the_public_api_is_the_last_releases(module: str) -> None:
    recorded = json.loads(RECORD.read_text())[module]
    imported = importlib.import_module(module)
    missing = sorted(name for name in recorded if not hasattr(imported, name))
    assert not missing, f"{module} no longer exports {missing}"
    for name, expected in recorded.items():
        now = describe(getattr(imported, name), module)
        if expected.get("class"):
            got = now["methods"]
            gone = sorted(set(expected["methods"]) - set(got))
            assert not gone, f"{module}.{name} lost the methods {gone}"
            for method, sig in expected["methods"].items():
                assert got[method] == sig, f"{module}.{name}.{method}{got[method]}: was {sig}"
        else:
            assert now == expected, f"{module}.{name}: {now}, was {expected}"


@pytest.mark.parametrize("module", MODULES)
def test_no_public_name_is_added_without_a_record(module: str) -> None:
    """A name a pinned module defines anew is API too: recorded here (and said in the
    CHANGELOG), or made private. (The test above sees only the recorded names.)"""
    recorded = json.loads(RECORD.read_text())[module]
    unrecorded = sorted(set(public_names(importlib.import_module(module))) - set(recorded))
    assert not unrecorded, (
        f"{module} defines the public names {unrecorded} that public_api.json does not record: "
        "record them (see this module's docstring) and name them in CHANGELOG.md, or make "
        "them private"
    )


def record_module(name: str) -> dict[str, Any]:
    module = importlib.import_module(name)
    return {attr: describe(getattr(module, attr), name) for attr in public_names(module)}


def record() -> dict[str, dict[str, Any]]:
    return {name: record_module(name) for name in MODULES}


if __name__ == "__main__":  # record the API anew (see the module's docstring)
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devkit.settings")
    django.setup()
    json.dump(record(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
