"""``factory_of``: a function that makes a class's objects takes the class's own parameters.

``distlock.lock()`` and ``distlock.semaphore()`` take exactly what ``Lock`` and ``Semaphore``
take. Their parameters are written once, in the class's ``__init__``, and are public API all
the same: type checkers and IDEs read them from the decorator's types (a ParamSpec), help()
and ``inspect.signature`` from ``__signature__`` (the class's, returning the class), and
``typing.get_type_hints`` (what runtime checkers read) from ``__annotations__``. The function
keeps its own name and docstring. Its body (``return Lock(*args, **kwargs)``) says what a call
does, but only forwards: the function made calls the class itself, one frame less on every
lock made.
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
        # As written with ``from __future__ import annotations``: the class's name, a string.
        returns = cast(type, cls).__name__
        signature = inspect.signature(cls).replace(return_annotation=returns)

        @functools.wraps(function)
        def make(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return cls(*args, **kwargs)
            except TypeError:
                # Arguments that do not fit are the caller's mistake: say so in the name
                # they called (lock(), not Lock.__init__()). Any other TypeError (a value
                # the class refuses) is raised as it was. Checked only on this path: free
                # when the call succeeds.
                try:
                    signature.bind(*args, **kwargs)
                except TypeError as wrong:
                    raise TypeError(f"{function.__name__}() {wrong}") from None
                raise

        make.__signature__ = signature  # type: ignore[attr-defined]
        # functools.wraps copied the stand-in's (*args: Any, **kwargs: Any): the class's
        # parameters instead, as strings, which get_type_hints resolves in the decorated
        # function's module (its __wrapped__'s globals), as it did the spelled-out ones.
        make.__annotations__ = {
            name: param.annotation
            for name, param in signature.parameters.items()
            if param.annotation is not inspect.Parameter.empty
        } | {"return": returns}
        return make

    return decorate
