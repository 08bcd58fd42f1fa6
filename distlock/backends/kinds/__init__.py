"""The kinds of hold: the one place that names them. The backends (BaseLockBackend.of_kind),
the admin and ``manage.py distlock`` read them here, when they need them (not copied at
import); a Lock names its kind by its word.

A new kind is a module beside these (a KindDefinition named KIND), imported and listed in
both tuples below; docs/architecture.md, "Adding a kind", says what else it brings.
"""

from __future__ import annotations

from . import exclusive, semaphore, shared
from .definition import KindDefinition, OperatorTexts, ReleaseTexts

__all__ = [
    "KINDS",
    "SHOWN",
    "KindDefinition",
    "OperatorTexts",
    "ReleaseTexts",
    "definition",
    "several_holders",
    "words",
]

# In the order ``backend.kinds()`` gives them (the exclusive kind first).
KINDS: tuple[KindDefinition, ...] = (exclusive.KIND, shared.KIND, semaphore.KIND)
# In the order operators see their tables (the admin's list, ``distlock list``).
SHOWN: tuple[KindDefinition, ...] = (exclusive.KIND, semaphore.KIND, shared.KIND)


def words() -> tuple[str, ...]:
    """The kinds' words, in KINDS' order."""
    return tuple(kind.word for kind in KINDS)


def definition(word: str) -> KindDefinition:
    """Return the definition of kind ``word``; KeyError naming the kinds if there is none."""
    for kind in KINDS:
        if kind.word == word:
            return kind
    raise KeyError(f"{word!r} is no kind of hold: one of {', '.join(words())}.")


def several_holders() -> tuple[KindDefinition, ...]:
    """The kinds operators see one row per name of, with its holders (all but the lock)."""
    return tuple(kind for kind in SHOWN if kind.operator is not None)
