"""A pytest plugin that runs the collected tests in reverse order (``-p
tests.support.reverse_order``): CI's whole-suite run uses it, while every other run keeps the
files' order, so a test that passes only after an earlier one (a lock it left held, a module
it imported) fails in one of the two. Reversing the whole list keeps each module's and each
parameter's tests together, so no fixture is set up more often than forward."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by fixture parameters
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.reverse()
