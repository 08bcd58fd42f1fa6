"""The public API is typed (issue 2, item 10): every function and public method a user can
reach from ``distlock``, ``distlock.management`` and the backends' public surface annotates
each parameter and its return value, and the package ships ``py.typed``."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

import distlock
from distlock.backends.base import BaseLockBackend
from distlock.fencing import __all__ as fencing_names
from distlock.management import LockedCommandMixin


def public_callables():
    import distlock.fencing as fencing

    roots = [getattr(distlock, name) for name in distlock.__all__]
    roots += [getattr(fencing, name) for name in fencing_names]
    roots += [LockedCommandMixin, BaseLockBackend, type(distlock.locks)]
    for root in roots:
        if inspect.isclass(root):
            # Its own methods and those of its bases in distlock (Lock's calls: LockCalls).
            for owner in inspect.getmro(root):
                if owner.__module__.startswith("distlock"):
                    yield from public_methods(owner)
        elif inspect.isfunction(root):
            yield root.__qualname__, root


def public_methods(owner: type):
    for name, member in vars(owner).items():
        if (
            not name.startswith("_")
            or name in {"__init__", "__enter__", "__exit__", "__aenter__", "__aexit__", "__call__"}
        ) and inspect.isfunction(member):
            yield f"{owner.__qualname__}.{name}", member


@pytest.mark.parametrize(
    ("qualname", "function"),
    list(public_callables()),
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_every_parameter_and_return_is_annotated(qualname: str, function) -> None:
    signature = inspect.signature(function)
    missing = [
        name
        for name, parameter in signature.parameters.items()
        if name not in {"self", "cls"} and parameter.annotation is inspect.Parameter.empty
    ]
    assert not missing, f"{qualname}: parameters without a type: {missing}"
    assert signature.return_annotation is not inspect.Signature.empty, f"{qualname}: no return type"


def test_py_typed_is_shipped() -> None:
    package = Path(distlock.__file__).parent
    assert (package / "py.typed").exists()
    setup_cfg = (package.parent / "setup.cfg").read_text()
    assert "py.typed" in setup_cfg


@pytest.mark.parametrize(
    ("factory", "cls"), [(distlock.lock, distlock.Lock), (distlock.semaphore, distlock.Semaphore)]
)
def test_the_factories_resolve_their_class_parameters_at_run_time(factory, cls) -> None:
    # What runtime type checkers read (typeguard, beartype, pydantic's validate_call): the
    # class's parameters, as the spelled-out factories gave them, not the stand-in's
    # (*args: Any, **kwargs: Any) that factory_of wraps.
    hints = typing.get_type_hints(factory)
    assert hints == {**typing.get_type_hints(cls.__init__), "return": cls}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: distlock.lock("a", wiat=5), "lock() got an unexpected keyword argument 'wiat'"),
        (lambda: distlock.lock(), "lock() missing a required argument: 'name'"),
        (lambda: distlock.semaphore("a"), "semaphore() missing a required argument: 'limit'"),
        (
            lambda: distlock.semaphore("a", 2, reentrant=True),
            "semaphore() got an unexpected keyword argument 'reentrant'",
        ),
    ],
)
def test_arguments_that_do_not_fit_are_named_after_the_factory_called(call, message) -> None:
    # The caller wrote lock(...), not Lock.__init__(...): the error names what they called.
    with pytest.raises(TypeError) as raised:
        call()
    assert str(raised.value) == message


def test_a_value_the_class_refuses_is_raised_as_the_class_raises_it() -> None:
    with pytest.raises(TypeError, match=r"^limit must be a whole number of permits"):
        distlock.semaphore("a", 2.5)
