"""A pytest plugin that runs the collected tests in reverse order (``-p
devkit.reverse_order``): CI's whole-suite run uses it, while every other run keeps the
files' order, so a test that passes only after an earlier one (a lock it left held, a module
it imported) fails in one of the two. It reverses the collected order first, before the
suite's own rules apply (pytest's grouping of tests by fixture parameter; browser tests last,
devkit.browser), so those still hold and no fixture is set up more often than
forward."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.reverse()
