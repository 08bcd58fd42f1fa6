"""``factory_of``: a function that makes a class's objects takes the class's own parameters.

``distlock.lock()`` and ``distlock.semaphore()`` take exactly what ``Lock`` and ``Semaphore``
take. Their parameters are written once, in the class's ``__init__``, and are public API all
the same: type checkers and IDEs read them from the decorator's types (a ParamSpec), help()
and ``inspect.signature`` from ``__signature__`` (the class's, returning the class). The
function keeps its own name and docstring.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")


def factory_of(cls: Callable[P, T]) -> Callable[[Callable[..., T]], Callable[P, T]]:
    """Return a decorator that gives the function it decorates the parameters of ``cls``."""

    def decorate(function: Callable[..., T]) -> Callable[P, T]:
        @functools.wraps(function)
        def make(*args: P.args, **kwargs: P.kwargs) -> T:
            return function(*args, **kwargs)

        # As written with ``from __future__ import annotations``: the class's name, a string.
        returns = cast(type, cls).__name__
        make.__signature__ = inspect.signature(cls).replace(return_annotation=returns)  # type: ignore[attr-defined]
        return make

    return decorate
