"""Task lock names (distlock.contrib.task_lock) and the guard of distlock.contrib.tasks."""

from __future__ import annotations

import importlib
import sys

import django
import pytest
from django.core.exceptions import ImproperlyConfigured

from distlock.contrib.task_lock import TaskLockName, was_skipped


def charge(order_id: int, currency: str = "EUR", **extra: object) -> None: ...


def test_names_are_filled_from_the_bound_arguments_and_escaped() -> None:
    name = TaskLockName("charge:{order_id}:{currency}", charge, "test")
    assert name.render((7,), {}) == "charge:7:EUR"
    assert name.render((), {"order_id": "a:b/{c}", "currency": "x y"}) == (
        "charge:a%3Ab%2F%7Bc%7D:x%20y"
    )
    assert TaskLockName("charge:{shop}", charge, "test").render((1,), {"shop": "s"}) == "charge:s"


def test_bad_templates_fail_when_the_task_is_defined() -> None:
    def plain(order_id: int) -> None: ...

    with pytest.raises(ImproperlyConfigured, match="not a parameter"):
        TaskLockName("charge:{order}", plain, "test")
    with pytest.raises(ImproperlyConfigured, match="plain"):
        TaskLockName("charge:{order_id.pk}", plain, "test")
    with pytest.raises(ImproperlyConfigured, match="separator"):
        TaskLockName("{order_id}{order_id}", plain, "test")


def test_was_skipped() -> None:
    assert was_skipped({"distlock": "skipped", "lock": "x"})
    assert not was_skipped({"distlock": "other"})
    assert not was_skipped("skipped")


def test_the_tasks_integration_says_what_it_needs_on_older_django() -> None:
    sys.modules.pop("distlock.contrib.tasks", None)
    if django.VERSION < (6, 0):
        with pytest.raises(ImproperlyConfigured, match=r"Django >= 6\.0"):
            importlib.import_module("distlock.contrib.tasks")
    else:
        assert importlib.import_module("distlock.contrib.tasks").locked
