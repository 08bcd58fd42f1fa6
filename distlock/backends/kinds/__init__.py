"""The kinds of hold: the one place that names them. The backends (BaseLockBackend.of_kind),
the admin and ``manage.py distlock`` read KINDS; a Lock names its kind by its word.

A new kind is a module beside these (a KindDefinition named KIND), imported and listed
below; docs/architecture.md, "Adding a kind", says what else it brings.
"""

from __future__ import annotations

from . import exclusive, semaphore, shared
from .definition import KindDefinition

# In the order ``backend.kinds()`` gives them (the exclusive kind first).
KINDS: tuple[KindDefinition, ...] = (exclusive.KIND, shared.KIND, semaphore.KIND)
BY_WORD = {kind.word: kind for kind in KINDS}
WORDS = tuple(BY_WORD)


def definition(word: str) -> KindDefinition:
    """Return the definition of kind ``word``; KeyError naming the kinds if there is none."""
    try:
        return BY_WORD[word]
    except KeyError:
        raise KeyError(f"{word!r} is no kind of hold: one of {', '.join(WORDS)}.") from None


def several_holders() -> tuple[KindDefinition, ...]:
    """The kinds operators see one row per name of, with its holders (all but the lock)."""
    return tuple(kind for kind in KINDS if kind.operator is not None)
